"""dsmlkit's vLLM plugin, driven through vLLM 0.33.0's own serving classes.

Needs vLLM (``.ci/engines`` builds a venv with it); skipped where it is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("vllm")

from tests.engines import drivers
from tests.engines.vectors import (
    IDS,
    VECTORS,
    dsmlkit_answer,
    prompt_ids,
    thinking,
    token_deltas,
    tools_for,
)

# Serving engines (vLLM, SGLang, TensorRT-LLM's stand-in): imported, started or run as processes.
pytestmark = pytest.mark.slow

NAMES = {"v3.2": "dsmlkit_v32", "v4": "dsmlkit_v4", "v4.1": "dsmlkit_v41"}


@pytest.fixture(params=VECTORS, ids=IDS)
def vector(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param.get("options"):
        pytest.skip("engine parsers are lenient: the vector's options select strict markup")
    return request.param  # type: ignore[no-any-return]


def _setup(vector: dict[str, Any]) -> tuple[Any, Any]:
    parser_cls = drivers.vllm_parser_class(NAMES[vector["version"]])
    request = drivers.vllm_request(parser_cls, tools_for(vector), thinking(vector))
    return parser_cls, request


def test_streamed_per_token(vector: dict[str, Any]) -> None:
    parser_cls, request = _setup(vector)
    got = drivers.vllm_stream(parser_cls, request, token_deltas(vector["text"]), prompt_ids(vector))
    assert got == dsmlkit_answer(vector)


def test_streamed_in_token_batches(vector: dict[str, Any]) -> None:
    parser_cls, request = _setup(vector)
    for seed in range(3):
        deltas = token_deltas(vector["text"], seed=seed)
        got = drivers.vllm_stream(parser_cls, request, deltas, prompt_ids(vector))
        assert got == dsmlkit_answer(vector), seed


def test_whole(vector: dict[str, Any]) -> None:
    parser_cls, request = _setup(vector)
    got = drivers.vllm_whole(parser_cls, request, vector["text"], prompt_ids(vector))
    assert got == dsmlkit_answer(vector)


def test_names_registered_through_the_entry_point() -> None:
    from vllm.plugins import load_general_plugins
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    load_general_plugins()
    for name in NAMES.values():
        assert ToolParserManager.get_tool_parser(name).engine_based_streaming
        assert ReasoningParserManager.get_reasoning_parser(name).engine_based_streaming


def test_adjust_request_keeps_special_tokens() -> None:
    parser_cls = drivers.vllm_parser_class("dsmlkit_v41")
    request = drivers.vllm_request(parser_cls, tools_for(VECTORS[0]), thinking=False)
    assert request.skip_special_tokens is False
    assert request.structured_outputs is None  # auto, no strict tool: unconstrained


@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_forced_choice_is_constrained_by_dsmlkit_grammar(choice: Any) -> None:
    grammar = pytest.importorskip("dsmlkit.grammar")
    tools = [drivers.WEATHER_TOOL]
    parser_cls = drivers.vllm_parser_class("dsmlkit_v41")
    request = drivers.vllm_request(parser_cls, tools, thinking=False, tool_choice=choice)
    name = choice if isinstance(choice, str) else "get_weather"
    want = grammar.structural_tag("v4.1", tools, tool_choice=name, thinking=False, parallel=True)
    assert json.loads(request.structured_outputs.structural_tag) == want
    assert request.skip_special_tokens is False


def test_core_import_does_not_import_vllm() -> None:
    code = (
        "import sys, dsmlkit, dsmlkit.parse, dsmlkit.render, dsmlkit.api, "
        "dsmlkit.integrations.split; print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
