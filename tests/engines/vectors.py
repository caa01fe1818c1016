"""The parse vectors as an engine sees them: tools, real token ids, dsmlkit's answers.

Each vector gets a tool list declaring every function its expected calls name (with the
argument types they carry), so the engines keep the calls; dsmlkit's reference answer
is parsed with the same tools. Texts are tokenized with the bundled DeepSeek V4
tokenizer and streamed token by token through ``tokenizers.DecodeStream`` (what vLLM's
incremental detokenizer uses), so deltas split where a served model's do.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

from dsmlkit.parse import MessageCollector, Parser
from dsmlkit.render.tokens import bundled_tokenizer_path

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "data" / "parse.json").read_text("utf-8")
)["vectors"]
IDS = [v["id"] for v in VECTORS]

_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}


def _schema_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "object")


def tools_for(vector: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI-style tools naming every expected call (a placeholder when there is none)."""
    tools: dict[str, dict[str, Any]] = {}
    for call in vector["expected"]["calls"]:
        properties = tools.setdefault(call["name"], {})
        for key, value in call["arguments"].items():
            properties[key] = {"type": _schema_type(value)}
    if not tools:
        tools["placeholder_tool"] = {}
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": properties},
            },
        }
        for name, properties in tools.items()
    ]


def dialect_of(vector: dict[str, Any]) -> str:
    return str(vector["version"])


def thinking(vector: dict[str, Any]) -> bool:
    return bool(vector["mode"] == "thinking")


def dsmlkit_answer(vector: dict[str, Any]) -> dict[str, Any]:
    """What dsmlkit's own parser says (content, reasoning, calls) for the vector."""
    parser = Parser(
        dialect_of(vector),
        start_in="reasoning" if thinking(vector) else "content",
        tools=tools_for(vector),
    )
    collector = MessageCollector()
    collector.add(parser.feed(vector["text"]))
    collector.add(parser.close())
    message = collector.message()
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": [{"name": c.name, "arguments": c.arguments} for c in message.calls],
    }


@cache
def hf_tokenizer() -> Any:
    """The bundled DeepSeek V4 tokenizer as vLLM serves one (a cached transformers one)."""
    from transformers import PreTrainedTokenizerFast
    from vllm.tokenizers.hf import get_cached_tokenizer

    return get_cached_tokenizer(
        PreTrainedTokenizerFast(tokenizer_file=str(bundled_tokenizer_path()))
    )


def token_deltas(
    text: str, *, group: int = 1, seed: int | None = None
) -> list[tuple[str, list[int]]]:
    """``(delta_text, delta_token_ids)`` as the detokenizer yields them.

    ``group`` tokens per delta, or (with ``seed``) a random 1-6 tokens per delta, as an
    engine that batches stream output does.
    """
    from tokenizers.decoders import DecodeStream

    tokenizer = hf_tokenizer()
    ids = tokenizer.encode(text, add_special_tokens=False)
    stream = DecodeStream(skip_special_tokens=False)
    rng = random.Random(seed)
    deltas: list[tuple[str, list[int]]] = []
    i = 0
    while i < len(ids):
        size = rng.randint(1, 6) if seed is not None else group
        batch = ids[i : i + size]
        pieces = [stream.step(tokenizer._tokenizer, token) or "" for token in batch]
        deltas.append(("".join(pieces), batch))
        i += size
    return deltas


def prompt_ids(vector: dict[str, Any]) -> list[int]:
    """A prompt that ends the way the vector's mode says (``<think>`` or ``</think>``)."""
    tokenizer = hf_tokenizer()
    tail = "<think>" if thinking(vector) else "</think>"
    return list(tokenizer.encode("<｜User｜>hi<｜Assistant｜>" + tail, add_special_tokens=False))


def parsed_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


#: Write and Bash, the two tools of TensorRT-LLM issue #21014's report (the seed repro).
WRITE_AND_BASH: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "Write",
            "parameters": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]
