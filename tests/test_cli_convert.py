"""``dsmlkit convert --from anthropic|openai [FILE]``: the shape an external check drives."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.cli import main

VECTORS = json.loads((Path(__file__).parent / "data" / "conversion.json").read_text("utf-8"))


def convert(
    args: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None
) -> tuple[int, Any, str]:
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")))
    try:
        code = main(["convert", *args])
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else None, err


def test_converts_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vector = next(v for v in VECTORS if v["id"] == "anth-tool-choice-any-disable-parallel")
    path = tmp_path / "body.json"
    path.write_text(json.dumps(vector["request"]), "utf-8")
    code, output, _ = convert(["--from", "anthropic", str(path)], capsys)
    assert code == 0
    assert set(output) == {"messages", "tools", "options"}
    assert output["messages"] == vector["expected_chat_messages"]
    assert output["tools"] == vector["expected_params"]["tools"]
    assert output["options"]["tool_choice"] == "required"
    assert output["options"]["parallel_tool_calls"] is False


def test_reads_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    body = {"model": "m", "messages": [{"role": "developer", "content": "Metric."}]}
    code, output, _ = convert(["--from", "openai"], capsys, stdin=json.dumps(body))
    assert code == 0
    assert output["messages"] == [{"role": "system", "content": "Metric."}]
    assert output["options"]["thinking"] is True


def test_invalid_request_prints_the_api_error_body(capsys: pytest.CaptureFixture[str]) -> None:
    body = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "x"}]}
    code, output, _ = convert(["--from", "openai"], capsys, stdin=json.dumps(body))
    assert code == 3
    assert output["error"]["type"] == "invalid_request_error"
    assert output["error"]["param"] == "messages[0].tool_call_id"

    code, output, _ = convert(["--from", "anthropic"], capsys, stdin=json.dumps(body))
    assert code == 3
    assert output["type"] == "error"
    assert output["error"]["type"] == "invalid_request_error"
    assert output["error"]["message"].startswith("max_tokens")


def test_non_json_input_is_an_invalid_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, output, _ = convert(["--from", "anthropic"], capsys, stdin="{not json")
    assert code == 3
    assert output["type"] == "error"


def test_unreadable_file_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output, err = convert(["--from", "openai", str(tmp_path / "missing.json")], capsys)
    assert code == 3
    assert output is None
    assert "cannot read" in err


@pytest.mark.slow
def test_console_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(VECTORS[0]["request"]), "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "dsmlkit", "convert", "--from", "anthropic", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == VECTORS[0]["expected_chat_messages"]
