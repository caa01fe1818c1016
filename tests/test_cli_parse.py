"""``dsmlkit parse``: the JSON shapes an external conformance check reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.dialects import V4, V4_1
from tests.helpers import write_block

# Every test runs the dsmlkit command in a subprocess.
pytestmark = pytest.mark.slow

TEXT = "Checking.\n" + write_block(V4_1, [("get_weather", {"city": "Oslo", "days": 3})])


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "dsmlkit", "parse", *args],
        input=stdin.encode("utf-8"),
        capture_output=True,
        check=False,
    )


def result_of(*args: str, stdin: str = "") -> dict[str, Any]:
    done = run_cli(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 2
    return json.loads(lines[0])  # type: ignore[no-any-return]


def test_prints_the_message_shape() -> None:
    result = result_of("--dialect", "v4.1", stdin=TEXT)
    assert set(result) == {"content", "reasoning", "calls", "diagnostics", "finish_reason"}
    assert result["content"] == "Checking.\n"
    assert result["finish_reason"] == "tool_calls"
    (call,) = result["calls"]
    assert set(call) == {"id", "name", "arguments"}
    assert call["name"] == "get_weather"
    assert call["arguments"] == {"city": "Oslo", "days": 3}
    assert call["id"].startswith("call_")


@pytest.mark.parametrize("size", ["1", "2", "7", "1000"])
def test_chunk_size_does_not_change_the_result(size: str) -> None:
    whole = result_of(stdin=TEXT)
    chunked = result_of("--chunk-size", size, stdin=TEXT)
    for result in (whole, chunked):
        for call in result["calls"]:
            call.pop("id")
    assert chunked == whole


def test_file_argument_thinking_and_tools(tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    output.write_text("Let me think.</think>" + TEXT, "utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "get_weather"}}]))
    result = result_of("--thinking", "--tools", str(tools), str(output))
    assert result["reasoning"] == "Let me think."
    assert result["content"] == "Checking.\n"


def test_strict_and_finish_reason() -> None:
    v4_text = write_block(V4, [("f", {})])
    assert result_of("--dialect", "v4.1", "--strict", stdin=v4_text)["calls"] == []
    assert result_of("--dialect", "v4.1", stdin=v4_text)["calls"] != []
    cut = result_of("--finish-reason", "length", stdin=TEXT[:-3])
    assert cut["finish_reason"] == "length"
    assert cut["calls"] == []
    assert [d["kind"] for d in cut["diagnostics"]] == ["truncated_call"]


def test_events_prints_one_json_object_per_line() -> None:
    done = run_cli("--events", "--chunk-size", "5", stdin=TEXT)
    events = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "content" and types[-1] == "output_end"
    assert "tool_call_start" in types and "tool_call_end" in types
    fragments = "".join(e["text"] for e in events if e["type"] == "arguments")
    (end,) = [e for e in events if e["type"] == "tool_call_end"]
    assert fragments == end["arguments_json"]


def test_jsonl_batch_keeps_order_and_survives_bad_lines() -> None:
    lines = [
        {"text": TEXT, "dialect": "v4.1", "chunk_size": 3},
        "not json",
        {"text": "a\u2028b", "chunks": ["a", "\u2028b"]},
        {"text": "x", "chunks": ["y"]},
        {"text": "Hm.</think>ok", "thinking": True, "dialect": "v4"},
        {"text": TEXT[:-3], "finish_reason": "length"},
        {"text": write_block(V4, [("f", {})]), "dialect": "v4.1", "strict": True},
    ]
    stdin = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    done = run_cli("--jsonl", stdin=stdin + "\n")
    assert done.returncode == 3  # some lines failed; each is named on stderr
    assert [line.split(":")[1] for line in done.stderr.decode("utf-8").splitlines()] == [
        " stdin line 2",
        " stdin line 4",
    ]
    out = done.stdout.decode("utf-8").split("\n")
    assert out[-1] == ""
    results = [json.loads(line) for line in out[:-1]]
    assert len(results) == 7
    assert results[0]["calls"][0]["arguments"] == {"city": "Oslo", "days": 3}
    assert "error" in results[1]
    assert results[2]["content"] == "a\u2028b"
    assert "error" in results[3]
    assert (results[4]["reasoning"], results[4]["content"]) == ("Hm.", "ok")
    assert results[5]["finish_reason"] == "length"
    assert results[6]["calls"] == []


def test_bad_arguments_fail_cleanly(tmp_path: Path) -> None:
    assert run_cli("--chunk-size", "0").returncode == 2
    assert run_cli("--dialect", "v9").returncode == 2
    missing = run_cli(str(tmp_path / "nope.txt"))
    assert missing.returncode == 3
    assert b"nope.txt" in missing.stderr


def test_jsonl_reads_a_file_and_takes_the_flags_as_defaults(tmp_path: Path) -> None:
    block = write_block(V4_1, [("f", {})])
    lines = [
        {"text": "Hm.</think>ok"},
        {"text": "plain", "thinking": False, "finish_reason": "stop"},
        {"text": block, "thinking": False},
        {"text": block, "thinking": False, "strict": False, "dialect": "v4.1", "tools": []},
    ]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(json.dumps(line) for line in lines) + "\n", "utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {}}]), "utf-8")
    flags = ["--dialect", "v4", "--thinking", "--strict", "--finish-reason", "length"]
    done = run_cli("--jsonl", str(batch), *flags, stdin="not read")
    assert done.returncode == 0, done.stderr
    first, second, strict, relaxed = map(json.loads, done.stdout.decode("utf-8").splitlines())
    assert (first["reasoning"], first["content"], first["finish_reason"]) == ("Hm.", "ok", "length")
    assert (second["content"], second["finish_reason"]) == ("plain", "stop")
    assert second["reasoning"] == ""
    assert strict["calls"] == [] and "calls>" in strict["content"]  # v4 --strict: not a block
    assert [call["name"] for call in relaxed["calls"]] == ["f"]

    with_tools = run_cli("--jsonl", str(batch), *flags, "--tools", str(tools))
    assert with_tools.returncode == 3
    results = [json.loads(line) for line in with_tools.stdout.decode("utf-8").splitlines()]
    assert ["error" in result for result in results] == [True, True, True, False]
    assert "has no function name" in results[0]["error"]  # the --tools default was used
