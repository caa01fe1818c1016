"""dsmlkit's SGLang plugin, driven through SGLang 0.5.23's own parser classes.

``ReasoningParser`` and ``FunctionCallParser`` looked up by the plugin's names, fed in
the order ``OpenAIServingChat`` feeds them. Needs SGLang; skipped where it is absent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("sglang")

from tests.engines import drivers
from tests.engines.vectors import (
    IDS,
    VECTORS,
    dsmlkit_answer,
    thinking,
    token_deltas,
    tools_for,
)

# Serving engines (vLLM, SGLang, TensorRT-LLM's stand-in): imported, started or run as processes.
pytestmark = pytest.mark.slow

NAMES = {"v3.2": "dsmlkit_v32", "v4": "dsmlkit_v4", "v4.1": "dsmlkit_v41"}


@pytest.fixture(autouse=True)
def _plugins() -> None:
    drivers.sglang_register()


@pytest.fixture(params=VECTORS, ids=IDS)
def vector(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param.get("options"):
        pytest.skip("engine parsers are lenient: the vector's options select strict markup")
    return request.param  # type: ignore[no-any-return]


def test_streamed_per_token(vector: dict[str, Any]) -> None:
    request = drivers.sglang_request(tools_for(vector), thinking(vector))
    name = NAMES[vector["version"]]
    got = drivers.sglang_stream(name, request, token_deltas(vector["text"]), thinking(vector))
    assert got == dsmlkit_answer(vector)


def test_streamed_in_token_batches(vector: dict[str, Any]) -> None:
    request = drivers.sglang_request(tools_for(vector), thinking(vector))
    name = NAMES[vector["version"]]
    for seed in range(3):
        deltas = token_deltas(vector["text"], seed=seed)
        assert drivers.sglang_stream(name, request, deltas, thinking(vector)) == dsmlkit_answer(
            vector
        ), seed


def test_whole(vector: dict[str, Any]) -> None:
    request = drivers.sglang_request(tools_for(vector), thinking(vector))
    got = drivers.sglang_whole(NAMES[vector["version"]], request, vector["text"], thinking(vector))
    assert got == dsmlkit_answer(vector)


def test_names_are_command_line_choices() -> None:
    from sglang.srt.server_args import _reasoning_parser_choices, _tool_call_parser_choices

    for name in NAMES.values():
        assert name in _tool_call_parser_choices()
        assert name in _reasoning_parser_choices()


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_forced_choice_gets_dsmlkit_structural_tag(choice: str) -> None:
    grammar = pytest.importorskip("dsmlkit.grammar")
    from sglang.srt.entrypoints.openai.protocol import ToolChoice
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    tools = [drivers.WEATHER_TOOL]
    request = drivers.sglang_request(tools, thinking=False)
    parser = FunctionCallParser(request.tools, "dsmlkit_v41")
    tool_choice: Any = choice if choice == "required" else ToolChoice(function={"name": choice})
    kind, tag = parser.get_structure_constraint(tool_choice)
    want = grammar.structural_tag("v4.1", tools, tool_choice=choice, thinking=False, parallel=True)
    assert kind == "structural_tag"
    assert json.loads(tag.model_dump_json()) == json.loads(json.dumps(want))


def test_v4_chat_encoding_adapter_leaves_output_to_the_plugin() -> None:
    """With dsmlkit's names the ``dsv4`` adapter only renders prompts; output goes the
    text path (the detectors above). SGLang's own names make recipe parse instead."""
    pytest.importorskip("deepseek_recipe")
    from sglang.srt.entrypoints.openai.serving_deepseek_recipe import (
        DeepSeekRecipeChatEncodingAdapter,
    )

    from tests.engines.vectors import hf_tokenizer

    def adapter(reasoning: str, tool: str) -> Any:
        return DeepSeekRecipeChatEncodingAdapter(
            chat_encoding_spec="dsv4",
            tokenizer=hf_tokenizer(),
            reasoning_parser=reasoning,
            tool_call_parser=tool,
            chat_hooks=None,
            default_chat_template_kwargs=None,
        )

    assert adapter("dsmlkit_v4", "dsmlkit_v4").output is None
    assert adapter("deepseek-v4", "deepseekv4").output is not None
