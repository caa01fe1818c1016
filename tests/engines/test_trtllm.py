"""dsmlkit's TensorRT-LLM adapter, driven as trtllm-serve drives its parsers.

TensorRT-LLM cannot be installed here, so these tests run against the stand-in package in
``trtllm_standin/`` (TensorRT-LLM's parser tables, base classes, post-processing steps and
click options, written from its public source), which only these tests put on
``sys.path``. They need click and pydantic (both in the ``dev`` extra), not TensorRT-LLM.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("click")
pytest.importorskip("pydantic")

from dsmlkit.dialects import V3_2, V4_1, Dialect
from tests.engines import drivers
from tests.engines.vectors import (
    IDS,
    VECTORS,
    WRITE_AND_BASH,
    dsmlkit_answer,
    thinking,
    tools_for,
)
from tests.helpers import write_block

# Serving engines (vLLM, SGLang, TensorRT-LLM's stand-in): imported, started or run as processes.
pytestmark = pytest.mark.slow

STANDIN = Path(__file__).parent / "trtllm_standin"
ROOT = Path(__file__).parent.parent.parent
NAMES = {"v3.2": "dsmlkit_v32", "v4": "dsmlkit_v4", "v4.1": "dsmlkit_v41"}


@pytest.fixture(scope="module", autouse=True)
def _standin() -> Iterator[None]:
    """The stand-in on ``sys.path`` for this module only, with dsmlkit's names registered."""
    sys.path.insert(0, str(STANDIN))
    from dsmlkit.integrations.trtllm import register

    register()
    yield
    sys.path.remove(str(STANDIN))
    for name in list(sys.modules):
        if name.split(".")[0] == "tensorrt_llm" or name == "dsmlkit.integrations.trtllm":
            del sys.modules[name]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(STANDIN), str(ROOT / "src"), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=_env(), timeout=60
    )


def _chunks(text: str, seed: int) -> list[str]:
    """``text`` in random 1-6 character increments."""
    rng = random.Random(seed)
    chunks, i = [], 0
    while i < len(text):
        size = rng.randint(1, 6)
        chunks.append(text[i : i + size])
        i += size
    return chunks


# -- TensorRT-LLM issue #21014: closing tags quoted inside a value ----------------------


def seed_output(dialect: Dialect) -> tuple[str, list[dict[str, Any]]]:
    """A Write whose content quotes the dialect's three closers, then a Bash call."""
    content = (
        f"Closers: {dialect.parameter_close()} then {dialect.invoke_close()}\n"
        f"and {dialect.block_close()} end."
    )
    calls: list[tuple[str, dict[str, Any]]] = [
        ("Write", {"file_path": "/tmp/dsml.md", "content": content}),
        ("Bash", {"command": "wc -c /tmp/dsml.md"}),
    ]
    text = "I will write the file." + write_block(dialect, calls)
    return text, [{"name": name, "arguments": arguments} for name, arguments in calls]


@pytest.mark.parametrize("dialect", [V4_1, V3_2], ids=["v4.1", "v3.2"])
@pytest.mark.parametrize("think", [False, True], ids=["chat", "thinking"])
def test_seed_closers_inside_a_value(dialect: Dialect, think: bool) -> None:
    text, calls = seed_output(dialect)
    if think:
        text = "The content quotes DSML closers.</think>" + text
    want = {
        "content": "I will write the file.",
        "reasoning": "The content quotes DSML closers." if think else "",
        "calls": calls,
    }
    name = NAMES[dialect.name]
    assert drivers.trtllm_whole(drivers.trtllm_args(name, WRITE_AND_BASH, think), text) == want
    for seed in range(20):
        args = drivers.trtllm_args(name, WRITE_AND_BASH, think)
        assert drivers.trtllm_stream(args, _chunks(text, seed)) == want, seed


# -- the parse vectors ------------------------------------------------------------------


@pytest.fixture(params=VECTORS, ids=IDS)
def vector(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param.get("options"):
        pytest.skip("engine parsers are lenient: the vector's options select strict markup")
    return request.param  # type: ignore[no-any-return]


def test_vector_whole_and_streamed(vector: dict[str, Any]) -> None:
    name = NAMES[vector["version"]]
    want = dsmlkit_answer(vector)
    args = drivers.trtllm_args(name, tools_for(vector), thinking(vector))
    assert drivers.trtllm_whole(args, vector["text"]) == want
    args = drivers.trtllm_args(name, tools_for(vector), thinking(vector))
    assert drivers.trtllm_stream(args, list(vector["text"])) == want
    for seed in range(3):
        args = drivers.trtllm_args(name, tools_for(vector), thinking(vector))
        assert drivers.trtllm_stream(args, _chunks(vector["text"], seed)) == want, seed


# -- registration, the launcher, the worker hook ----------------------------------------


def test_register_fills_both_tables() -> None:
    from tensorrt_llm.llmapi.reasoning_parser import ReasoningParserFactory
    from tensorrt_llm.serve.tool_parser import ToolParserFactory

    for name in NAMES.values():
        tool = ToolParserFactory.create_tool_parser(name)
        reasoning = ReasoningParserFactory.create_reasoning_parser(name, {"thinking": True})
        assert tool.needs_raw_special_tokens and reasoning.needs_raw_special_tokens
        assert not tool.supports_structural_tag()


def test_launcher_accepts_the_names() -> None:
    out = _run(
        "-c",
        "from dsmlkit.integrations.trtllm import serve; serve()",
        "deepseek-ai/DeepSeek-V4.1-Flash",
        "--tool_parser",
        "dsmlkit_v41",
        "--reasoning_parser",
        "dsmlkit_v41",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "model": "deepseek-ai/DeepSeek-V4.1-Flash",
        "tool_parser": "DsmlkitV41ToolParser",
        "reasoning_parser": "DsmlkitV41ReasoningParser",
    }


@pytest.mark.parametrize("flag", ["--tool_parser", "--reasoning_parser"])
def test_plain_serve_refuses_the_names(flag: str) -> None:
    out = _run("-m", "tensorrt_llm.commands.serve", "model", flag, "dsmlkit_v41")
    assert out.returncode == 2
    assert f"Invalid value for '{flag}'" in out.stderr


def test_registering_after_serve_is_imported_is_too_late() -> None:
    """click copies the choices when trtllm-serve's module is imported: why the launcher
    registers first."""
    code = (
        "import tensorrt_llm.commands.serve as s; "
        "from dsmlkit.integrations.trtllm import register; register(); s.main()"
    )
    out = _run("-c", code, "model", "--tool_parser", "dsmlkit_v41")
    assert out.returncode == 2
    assert "Invalid value for '--tool_parser'" in out.stderr


def test_console_script_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert project["scripts"]["dsmlkit-trtllm-serve"] == "dsmlkit.integrations.trtllm:serve"


def test_post_processor_hook_registers_in_a_fresh_worker() -> None:
    """A postprocess worker is a fresh process that builds the hook from its import
    path; before that the names are unknown there, after it the parsers build."""
    from dsmlkit.integrations.trtllm import RegisterInWorkers

    code = (
        "import json, pickle, sys\n"
        "from tensorrt_llm.serve.tool_parser import ToolParserFactory\n"
        "from tensorrt_llm.executor.postprocessor_hook import PostProcessorHookChunk\n"
        "known = lambda: sorted(n for n in ToolParserFactory.parsers if 'dsmlkit' in n)\n"
        "before = known()\n"
        "hook = pickle.loads(bytes.fromhex(sys.argv[1]))()\n"
        "verdict = hook(PostProcessorHookChunk(7, 0, 'a</think>b', 'a</think>b', False))\n"
        "parser = ToolParserFactory.create_tool_parser('dsmlkit_v41')\n"
        "print(json.dumps([before, known(), type(parser).__name__, verdict.action, "
        "verdict.text]))\n"
    )
    out = _run("-c", code, pickle.dumps(RegisterInWorkers).hex())
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [
        [],
        ["dsmlkit_v32", "dsmlkit_v4", "dsmlkit_v41"],
        "DsmlkitV41ToolParser",
        "emit",
        "a</think>b",
    ]
