"""``dsmlkit render``: every golden case byte for byte through the CLI, flags, output, errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.cli import main
from dsmlkit.dialects import BOS

GOLDEN = Path(__file__).parent / "data" / "golden"
FRONTEND_CRATES = GOLDEN / "v4.1" / "frontend_crates_deepseek_v41.json"
SYSTEM = "<｜System｜>"
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "reasoning_content": "EARLIER REASONING", "content": "Hi."},
    {"role": "user", "content": "Capital of France?"},
]


def run_cli(
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    stdin: Any = None,
) -> tuple[int, bytes, str]:
    """(exit code, stdout bytes, stderr text) of ``dsmlkit render ARGV``."""
    if stdin is not None:
        data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode("utf-8")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    try:
        code = main(["render", *argv])
    except SystemExit as exit_:  # argparse usage errors
        code = exit_.code if isinstance(exit_.code, int) else 2
    captured = capsysbinary.readouterr()
    return code, captured.out, captured.err.decode("utf-8")


def golden_flags(dialect: str, meta: dict[str, Any]) -> list[str]:
    """The command-line spelling of a golden case's reference ``encode_messages`` options."""
    encode = meta["encode_options"]
    flags = ["--dialect", dialect, "--mode", encode["thinking_mode"]]
    if encode.get("reasoning_effort") is not None:
        flags += ["--reasoning-effort", str(encode["reasoning_effort"])]
    if not encode["drop_thinking"]:
        flags.append("--keep-thinking")
    if not encode["add_default_bos_token"]:
        flags.append("--no-bos")
    if not encode.get("add_generation_prompt", True):
        flags.append("--no-generation-prompt")
    if dialect == "v4.1":
        early_drop = meta["source_repo"] == "sgl-project/sglang"
        early_drop |= encode.get("effective_budget") == 50
        flags += ["--effort-table", "preview" if early_drop else "release"]
    return flags


def golden_cases() -> list[Any]:
    cases = []
    for meta_path in sorted(GOLDEN.glob("*/*.meta.json")):
        name = meta_path.name.removesuffix(".meta.json")
        if (meta_path.parent / f"{name}.input.json").exists():
            cases.append(
                pytest.param(meta_path.parent.name, name, id=f"{meta_path.parent.name}/{name}")
            )
    return cases


@pytest.mark.parametrize(("dialect", "name"), golden_cases())
def test_golden_case_renders_byte_for_byte(
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    dialect: str,
    name: str,
) -> None:
    folder = GOLDEN / dialect
    meta = json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
    expected = (folder / f"{name}.expected.txt").read_bytes()
    if "strip()" in meta["encode_options"].get("compare", ""):
        expected = expected.strip()
    argv = [*golden_flags(dialect, meta), str(folder / f"{name}.input.json")]

    code, out, err = run_cli(capsysbinary, monkeypatch, argv)

    assert (code, err) == (0, "")
    assert out == expected


def frontend_cases() -> list[Any]:
    cases = json.loads(FRONTEND_CRATES.read_text(encoding="utf-8"))
    return [pytest.param(case, id=case["name"]) for case in cases]


@pytest.mark.parametrize("case", frontend_cases())
def test_frontend_crates_case_renders_byte_for_byte(
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    case: dict[str, Any],
) -> None:
    argv = ["--dialect", "v4.1", "--mode", "thinking" if case["thinking"] else "chat"]
    argv += ["--reasoning-effort", str(case["effort"])]
    if not case["drop_thinking"]:
        argv.append("--keep-thinking")

    code, out, _ = run_cli(capsysbinary, monkeypatch, argv, stdin=case["messages"])

    assert code == 0
    assert out == case["expected"].encode("utf-8")


@pytest.mark.slow
def test_output_is_utf8_bytes_whatever_the_locale(tmp_path: Path) -> None:
    source = GOLDEN / "v4" / "case3.input.json"  # CJK text
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    completed = subprocess.run(
        [sys.executable, "-m", "dsmlkit", "render", "--dialect", "v4", str(source)],
        capture_output=True,
        env=env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == (GOLDEN / "v4" / "case3.expected.txt").read_bytes()


def test_flags_win_over_the_settings_in_the_input(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = str(GOLDEN / "v4.1" / "drop_case5.input.json")  # thinking_mode thinking, max
    _, from_file, _ = run_cli(capsysbinary, monkeypatch, ["--dialect", "v4.1", source])
    _, low, _ = run_cli(
        capsysbinary, monkeypatch, ["--dialect", "v4.1", "--reasoning-effort", "low", source]
    )
    _, chat, _ = run_cli(capsysbinary, monkeypatch, ["--dialect", "v4.1", "--mode", "chat", source])
    assert b"Reasoning Effort: 100 " in from_file
    assert b"Reasoning Effort: 50 " in low  # release table: low = 50
    assert b"Reasoning Effort" not in chat
    assert chat.endswith("<｜Assistant｜></think>".encode())


def test_option_flags_change_the_prompt(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["--dialect", "v4"]
    _, default, _ = run_cli(capsysbinary, monkeypatch, base, stdin=CONVERSATION)
    _, kept, _ = run_cli(capsysbinary, monkeypatch, [*base, "--keep-thinking"], stdin=CONVERSATION)
    _, no_bos, _ = run_cli(capsysbinary, monkeypatch, [*base, "--no-bos"], stdin=CONVERSATION)
    _, no_header, _ = run_cli(
        capsysbinary, monkeypatch, [*base, "--no-generation-prompt"], stdin=CONVERSATION
    )
    assert b"EARLIER REASONING" not in default
    assert b"EARLIER REASONING" in kept
    assert default.startswith(BOS.encode()) and no_bos == default.removeprefix(BOS.encode())
    assert default.endswith("<｜Assistant｜><think>".encode())
    assert not no_header.endswith(b"<think>") and default.startswith(no_header)


def test_tool_reference_schema_hides_deferred_tools(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def tool(name: str, **extra: Any) -> dict[str, Any]:
        function = {"name": name, "parameters": {"type": "object", "properties": {}}}
        return {"type": "function", "function": function, **extra}

    body = {
        "messages": [
            {"role": "user", "content": "find a tool"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": "{}"},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "tool_reference", "name": "deploy"}],
            },
        ],
        "tools": [tool("search"), tool("deploy", defer_loading=True)],
    }
    argv = ["--dialect", "v4.1", "--mode", "chat"]
    _, by_name, _ = run_cli(capsysbinary, monkeypatch, argv, stdin=body)
    _, by_schema, _ = run_cli(
        capsysbinary, monkeypatch, [*argv, "--tool-reference", "schema"], stdin=body
    )
    definition = b'{"name": "deploy"'
    assert by_name.count(definition) == 1  # only in the system prompt's tools section
    assert by_schema.count(definition) == 1  # only in the tool result
    assert by_name.index(definition) < by_name.index(b"find a tool")
    assert by_schema.index(definition) > by_schema.index(b"find a tool")


@pytest.mark.slow
def test_tokens_prints_prompt_ids_and_output_start(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tokenizers")
    argv = ["--dialect", "v4"]
    _, prompt, _ = run_cli(capsysbinary, monkeypatch, argv, stdin=CONVERSATION)
    code, out, err = run_cli(capsysbinary, monkeypatch, [*argv, "--tokens"], stdin=CONVERSATION)
    document = json.loads(out)
    assert (code, err) == (0, "")
    assert list(document) == ["prompt", "token_ids", "output_starts_in"]
    assert document["prompt"].encode("utf-8") == prompt
    assert document["output_starts_in"] == "reasoning"
    ids = document["token_ids"]
    assert ids[0] == 0 and ids[-2:] == [128804, 128821]  # <｜Assistant｜><think>
    assert all(isinstance(i, int) for i in ids)
    _, chat, _ = run_cli(
        capsysbinary, monkeypatch, [*argv, "--mode", "chat", "--tokens"], stdin=CONVERSATION
    )
    assert json.loads(chat)["output_starts_in"] == "content"


@pytest.mark.slow
def test_tokens_warns_about_a_missing_token_on_stderr(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tokenizers")
    from dsmlkit.render.tokens import bundled_tokenizer_path

    folder = bundled_tokenizer_path().parent  # not cached under this path by other tests
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    argv = ["--dialect", "v4.1", "--tokens", "--tokenizer", str(folder)]
    code, out, err = run_cli(capsysbinary, monkeypatch, argv, stdin=messages)
    assert code == 0
    assert SYSTEM in err and "warning" in err
    assert json.loads(out)["prompt"].startswith(BOS + SYSTEM)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("openai", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 10,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            },
        ),
    ],
)
def test_api_request_bodies_render_like_the_canonical_conversation(
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    body: dict[str, Any],
) -> None:
    canonical = [{"role": "user", "content": "hi"}]
    _, expected, _ = run_cli(capsysbinary, monkeypatch, ["--dialect", "v4"], stdin=canonical)
    code, out, err = run_cli(
        capsysbinary, monkeypatch, ["--dialect", "v4", "--api", api], stdin=body
    )
    assert (code, err) == (0, "")
    assert out == expected


def test_api_flags_win_over_the_body(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "max",
    }
    _, from_body, _ = run_cli(
        capsysbinary, monkeypatch, ["--dialect", "v4.1", "--api", "openai"], stdin=body
    )
    _, flagged, _ = run_cli(
        capsysbinary,
        monkeypatch,
        ["--dialect", "v4.1", "--api", "openai", "--reasoning-effort", "37"],
        stdin=body,
    )
    assert b"Reasoning Effort: 100 " in from_body
    assert b"Reasoning Effort: 37 " in flagged


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["--dialect", "v4"], [{"role": "bogus", "content": "x"}], "messages[0].role"),
        (["--dialect", "v4"], b"[{", "stdin is not valid JSON"),
        (["--dialect", "v4"], {"msgs": []}, "'messages'"),
        (["--dialect", "v4"], {"messages": [], "extra": 1}, "unknown input keys"),
        (["--dialect", "v4"], {"messages": [], "context": [{"role": "user"}]}, "context"),
        (
            ["--dialect", "v4.1", "--reasoning-effort", "101"],
            [{"role": "user", "content": "x"}],
            "101",
        ),
        (
            ["--dialect", "v4.1", "--effort-table", "nope"],
            [{"role": "user", "content": "x"}],
            "nope",
        ),
        (["--dialect", "v4", "--api", "openai"], {"model": "m", "messages": "x"}, "messages"),
    ],
)
def test_invalid_input_exits_3_with_a_message(
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    stdin: Any,
    message: str,
) -> None:
    code, out, err = run_cli(capsysbinary, monkeypatch, argv, stdin=stdin)
    assert (code, out) == (3, b"")
    assert err.startswith("dsmlkit render: ") and message in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--dialect", "v5"],
        ["--mode", "chat"],  # --dialect is required
        ["--dialect", "v4", "--tool-reference", "inline"],
        ["--dialect", "v4", "--tokenizer", "/tmp"],  # --tokenizer without --tokens
    ],
)
def test_usage_errors_exit_2(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    code, out, err = run_cli(
        capsysbinary, monkeypatch, argv, stdin=[{"role": "user", "content": "x"}]
    )
    assert (code, out) == (2, b"")
    assert err
