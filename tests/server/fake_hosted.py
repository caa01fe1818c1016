"""The hosted endpoints of the fake engine, as DeepSeek's API behaves: ``/v1/chat/completions``
(``https://api.deepseek.com``) and the Anthropic-format ``/v1/messages``
(``https://api.deepseek.com/anthropic``). :class:`~tests.server.fake_engine.FakeEngine`
serves both with its scripted replies (one fake: the hosted-mode tests and the engine tests
share it); this module writes their answers and refusals.

Answers: a scripted :class:`~tests.server.fake_engine.Reply` streams as chat chunks
(:func:`chat_chunks`, ``pieces`` as content deltas cut as given, so leaked DSML can be split
anywhere) or as Anthropic events (:func:`messages_events`: ``message_start``, ``ping``, a
``thinking`` block with its ``signature`` (:func:`signature_of`), a ``text`` block whose
``text_delta``\\ s are the pieces and the content, or the scripted ``blocks`` in their
order (:func:`block_events`: a server tool's blocks as DeepSeek's ``/anthropic`` endpoint
returns them), ``tool_use`` blocks with ``input_json_delta``\\ s, ``message_delta`` with
the stop reason and usage, ``message_stop``).

Refusals (:func:`hosted_refusal`), each a 400 in the endpoint's error shape
(:func:`error_body`):

1. Thinking mode (DeepSeek's default in both formats; off with ``thinking.type:
   "disabled"``, or ``chat_template_kwargs.thinking: false`` for the chat stand-in): an
   assistant turn with tool calls whose reasoning was not passed back. DeepSeek's thinking
   mode guide: for turns that perform tool calls, ``reasoning_content`` must be passed back
   in all later requests, else the API returns 400. The chat message is the one client
   projects report from DeepSeek's V4 API ("The `reasoning_content` in the thinking mode
   must be passed back to the API."; earlier answers said "Missing `reasoning_content`
   field in the assistant message at message index N"); the Anthropic format's ("The
   `content[].thinking` in the thinking mode must be passed back to the API.") is the one
   users of its ``/anthropic`` endpoint report. The thinking block's signature is not checked (an
   assumption: DeepSeek's compatibility table lists no signature check).
2. Thinking mode: ``tool_choice`` ``required`` or a named function (chat), ``any`` or
   ``tool`` (Anthropic format). The gateway's fallback (``--upstream-api chat``) is built
   for this answer; DeepSeek's docs give no wording, so the message here is assumed, and
   that the Anthropic format refuses the same is assumed too (its compatibility table lists
   ``any`` and ``tool`` as supported, without saying so for thinking mode).
3. Anthropic format: ``metadata.user_id`` not matching ``^[a-zA-Z0-9_-]+$``. DeepSeek's
   compatibility table lists ``metadata`` as ignored, but its endpoint answers such ids
   with "Invalid 'user_id': string does not match pattern. Expected a string that matches
   the pattern '^[a-zA-Z0-9_-]+$'" (reported by Claude Code users routed to DeepSeek); the
   pattern is the one DeepSeek's chat reference gives its user id. The message is theirs.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.server.fake_engine import Reply

#: The fake's route of the Anthropic format.
MESSAGES_PATH = "/v1/messages"
#: What DeepSeek says of a tool-call turn sent back without its reasoning (chat format).
HOSTED_REASONING_RULE = (
    "The `reasoning_content` in the thinking mode must be passed back to the API."
)
#: The same in the Anthropic format.
HOSTED_THINKING_RULE = (
    "The `content[].thinking` in the thinking mode must be passed back to the API."
)
#: The fake's answer to a forced tool choice in thinking mode (assumed wording).
HOSTED_CHOICE_RULE = "tool_choice `required` or a named tool is not supported in thinking mode"
#: DeepSeek's pattern of a user id, and its answer to one that does not match.
USER_ID = re.compile(r"[a-zA-Z0-9_-]+")
HOSTED_USER_ID_RULE = (
    "Invalid 'user_id': string does not match pattern. "
    "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'"
)
#: Anthropic stop reasons of the scripted finish reasons.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def signature_of(thinking: str) -> str:
    """The signature the fake gives a thinking block (its text's digest)."""
    return "sig_" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def _thinking(request: dict[str, Any]) -> bool:
    """Whether a request is in thinking mode (DeepSeek's default)."""
    switch = request.get("thinking")
    kwargs = request.get("chat_template_kwargs")
    disabled = isinstance(switch, dict) and switch.get("type") == "disabled"
    return not disabled and not (isinstance(kwargs, dict) and kwargs.get("thinking") is False)


def missing_reasoning(request: dict[str, Any]) -> int | None:
    """The index of the first assistant message with ``tool_calls`` but no (or empty)
    ``reasoning_content``, if the chat request is in thinking mode."""
    if not _thinking(request):
        return None
    calls_without_reasoning = (
        index
        for index, message in enumerate(request.get("messages") or ())
        if message.get("role") == "assistant"
        and message.get("tool_calls")
        and not message.get("reasoning_content")
    )
    return next(calls_without_reasoning, None)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return (
        [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []
    )


def missing_thinking(request: dict[str, Any]) -> int | None:
    """The index of the first assistant message with a ``tool_use`` block but no
    ``thinking`` block with text, if the Anthropic-format request is in thinking mode."""
    if not _thinking(request):
        return None
    for index, message in enumerate(request.get("messages") or ()):
        blocks = _blocks(message) if message.get("role") == "assistant" else []
        calls = any(block.get("type") == "tool_use" for block in blocks)
        thought = any(block.get("type") == "thinking" and block.get("thinking") for block in blocks)
        if calls and not thought:
            return index
    return None


def _forced(request: dict[str, Any], path: str) -> bool:
    choice = request.get("tool_choice")
    if path == MESSAGES_PATH:
        return isinstance(choice, dict) and choice.get("type") in ("any", "tool")
    return choice == "required" or isinstance(choice, dict)


def hosted_refusal(path: str, request: dict[str, Any]) -> str | None:
    """DeepSeek's 400 message for a hosted request at ``path`` (None: accepted)."""
    if path == MESSAGES_PATH:
        if missing_thinking(request) is not None:
            return HOSTED_THINKING_RULE
        metadata = request.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        if user_id is not None and not (isinstance(user_id, str) and USER_ID.fullmatch(user_id)):
            return HOSTED_USER_ID_RULE
    elif missing_reasoning(request) is not None:
        return HOSTED_REASONING_RULE
    if _thinking(request) and _forced(request, path):
        return HOSTED_CHOICE_RULE
    return None


def error_body(
    path: str, status: int, message: str, kind: str, param: str | None
) -> dict[str, Any]:
    """An error in the endpoint's shape: Anthropic's at ``/v1/messages``, else OpenAI's
    (vLLM's, with ``code``)."""
    if path == MESSAGES_PATH:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def sse_bytes(path: str, chunk: dict[str, Any]) -> bytes:
    """One SSE event: Anthropic's with its ``event:`` line, OpenAI's a ``data:`` line."""
    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    if path == MESSAGES_PATH:
        return b"event: " + str(chunk["type"]).encode() + b"\n" + data
    return data


def stream_end(path: str) -> bytes:
    """What ends a stream: ``[DONE]`` in the chat format, nothing in Anthropic's."""
    return b"" if path == MESSAGES_PATH else b"data: [DONE]\n\n"


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def envelope(kind: str, request: dict[str, Any], choices: list[Any]) -> dict[str, Any]:
    return {
        "id": "fake-1",
        "object": kind,
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": choices,
    }


def chat_chunks(reply: Reply, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The reply as chat chunks."""
    size = max(reply.chunk_size, 5)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None  # vLLM's, on the finishing chunk
        return envelope("chat.completion.chunk", request, [choice])

    yield chunk({"role": "assistant", "content": ""})
    for piece in reply.pieces:  # a scripted output, streamed as content the way it is cut
        yield chunk({"content": piece})
    for key, text in (("reasoning_content", reply.reasoning), ("content", reply.content)):
        for piece in _pieces(text, size):
            yield chunk({key: piece})
    for index, call in enumerate(reply.tool_calls):
        head = {"name": call["name"], "arguments": ""}
        yield chunk(
            {
                "tool_calls": [
                    {"index": index, "id": call["id"], "type": "function", "function": head}
                ]
            }
        )
        for piece in _pieces(call["arguments"], size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish_reason)


def chat_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole answer as one ``chat.completion`` (a chat request without ``stream``): the
    streamed ``chunks``' deltas folded into one message."""
    message: dict[str, Any] = {"role": "assistant", "content": "", "reasoning_content": ""}
    calls: list[dict[str, Any]] = []
    finish = "stop"
    for chunk in chunks:
        choice = chunk["choices"][0]
        delta = choice["delta"]
        for key in ("content", "reasoning_content"):
            message[key] += delta.get(key, "")
        for call in delta.get("tool_calls", ()):
            if "id" in call:
                calls.append(
                    {"id": call["id"], "type": "function", "function": dict(call["function"])}
                )
            else:
                calls[call["index"]]["function"]["arguments"] += call["function"]["arguments"]
        finish = choice["finish_reason"] or finish
    message["reasoning_content"] = message["reasoning_content"] or None
    if calls:
        message["tool_calls"] = calls
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
    }
    return {**chunks[-1], "object": "chat.completion", "choices": [choice]}


def messages_events(
    reply: Reply, request: dict[str, Any], prompt_tokens: int
) -> Iterator[dict[str, Any]]:
    """The reply as Anthropic stream events (their usage counts one token a delta)."""
    size = max(reply.chunk_size, 5)
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": request.get("model", "fake"),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 0},
    }
    yield {"type": "message_start", "message": message}
    yield {"type": "ping"}
    blocks = _BlockWriter()
    if reply.reasoning:
        yield from blocks.start({"type": "thinking", "thinking": "", "signature": ""})
        for piece in _pieces(reply.reasoning, size):
            yield blocks.delta({"type": "thinking_delta", "thinking": piece})
        yield blocks.delta({"type": "signature_delta", "signature": signature_of(reply.reasoning)})
    texts = [*reply.pieces, *_pieces(reply.content, size)]
    for item in reply.blocks or ([texts] if texts else []):
        yield from block_events(blocks, item, size)
    for call in reply.tool_calls:
        yield from blocks.start(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
        )
        for piece in _pieces(call["arguments"], size):
            yield blocks.delta({"type": "input_json_delta", "partial_json": piece})
    yield from blocks.stop()
    stop_reason = STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
    if reply.stop_reason is not None:
        stop_reason = "stop_sequence"
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": reply.stop_reason},
        "usage": {"output_tokens": blocks.tokens},
    }
    yield {"type": "message_stop"}


def block_events(
    blocks: _BlockWriter, item: str | list[str] | dict[str, Any], size: int
) -> Iterator[dict[str, Any]]:
    """One content block's events: a text block (its text, or its pieces, as
    ``text_delta``\\ s), or a block as DeepSeek's web tools return it (its guide "Web Tools":
    the client shows the blocks and passes them back unchanged): a ``server_tool_use``
    started with an empty ``input`` that ``input_json_delta``\\ s then fill, as Anthropic
    streams a tool's input; any other (``web_search_tool_result``, an error result …)
    whole in its ``content_block_start``."""
    if isinstance(item, dict):
        if item.get("type") != "server_tool_use":
            yield from blocks.start(item)
            return
        yield from blocks.start({**item, "input": {}})
        for piece in _pieces(json.dumps(item["input"]), size):
            yield blocks.delta({"type": "input_json_delta", "partial_json": piece})
        return
    yield from blocks.start({"type": "text", "text": ""})
    for piece in _pieces(item, size) if isinstance(item, str) else item:
        yield blocks.delta({"type": "text_delta", "text": piece})


class _BlockWriter:
    """Content block events, numbered in order, one block open at a time."""

    def __init__(self) -> None:
        self.index = -1
        self.open = False
        self.tokens = 0

    def start(self, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from self.stop()
        self.index += 1
        self.open = True
        yield {"type": "content_block_start", "index": self.index, "content_block": block}

    def delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        self.tokens += 1
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def stop(self) -> Iterator[dict[str, Any]]:
        if self.open:
            self.open = False
            yield {"type": "content_block_stop", "index": self.index}
