"""The command line as a user meets it: start-up cost, help, usage errors and input errors."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsmlkit import __version__
from dsmlkit.cli import EXIT_INPUT, EXIT_USAGE, SUBCOMMANDS, build_parser
from dsmlkit.dialects import DIALECT_ALIASES, DIALECTS

# The dsmlkit command in a subprocess, in all but two tests.
pytestmark = pytest.mark.slow


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsmlkit", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def test_version_and_help_import_no_subcommand() -> None:
    probe = (
        "import sys\n"
        "from dsmlkit.cli import main\n"
        "for argv in (['--version'], ['--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('dsmlkit.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = done.stdout.splitlines()[-1]
    assert "_cmd" not in loaded and "dsmlkit.parse" not in loaded, loaded
    assert f"dsmlkit {__version__}" in done.stdout
    assert all(name in done.stdout for name in SUBCOMMANDS)


def test_the_version_is_written_in_one_place() -> None:
    """``dsmlkit.__version__``: pyproject.toml names none and reads it from there, so the
    installed package's metadata says the same."""
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text("utf-8")
    assert 'dynamic = ["version"]' in pyproject and '\nversion = "' not in pyproject
    assert 'version = { attr = "dsmlkit._version.__version__" }' in pyproject
    assert importlib.metadata.version("dsmlkit") == __version__


@pytest.mark.parametrize(
    ("argv", "unknown", "suggestion"),
    [
        (["serve", "--prot", "9000"], "--prot 9000", "--port"),
        (["parse", "--dialekt=v4"], "--dialekt=v4", "--dialect"),
        (["render", "--dialect", "v4", "--tokns"], "--tokns", "--tokens"),
    ],
)
def test_an_unknown_flag_gets_the_subcommands_usage_and_a_suggestion(
    argv: list[str], unknown: str, suggestion: str
) -> None:
    done = run_cli(*argv)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith(f"usage: dsmlkit {argv[0]} ")
    assert f"unrecognized arguments: {unknown} (did you mean {suggestion}?)" in done.stderr
    assert "Traceback" not in done.stderr


def test_grammar_keeps_its_one_line_usage_errors_with_the_suggestion() -> None:
    done = run_cli("grammar", "--dialect", "v4", "--tools", "-", "--format", "ebnf", "--tols")
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == (
        "dsmlkit grammar: unrecognized arguments: --tols (did you mean --tools?)"
    )


def test_serve_help_lists_every_route_of_the_app_and_where_the_docs_are() -> None:
    pytest.importorskip("fastapi")
    from dsmlkit.server import ServerConfig, create_app

    def paths_of(routes: list[Any]) -> Iterator[str]:
        for route in routes:
            included = getattr(route, "original_router", None)
            yield from paths_of(included.routes) if included else (route.path,)

    paths = set(paths_of(create_app(ServerConfig(tokenizer="none")).router.routes))
    assert "/v1/responses" in paths
    done = run_cli("serve", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    missing = [
        path for path in sorted(paths) if f" {path}," not in text and f" {path})" not in text
    ]
    assert not missing and "/v1/responses)" in text
    assert "source repository" in text and "docs/server.md" in text


@pytest.mark.parametrize("alias", sorted(DIALECT_ALIASES))
def test_a_dialect_alias_is_taken_by_flags_environment_and_config_alike(
    alias: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = DIALECT_ALIASES[alias]
    for command, needed in (("parse", []), ("render", []), ("convert", ["--from", "openai"])):
        args = build_parser([command]).parse_args([command, *needed, "--dialect", alias])
        assert args.dialect == name
    grammar = ["grammar", "--dialect", alias, "--tools", "-", "--format", "ebnf"]
    assert build_parser(["grammar"]).parse_args(grammar).dialect == name
    monkeypatch.setenv("DSMLKIT_DIALECT", alias)
    assert build_parser(["serve"]).parse_args(["serve"]).dialect == name
    pytest.importorskip("fastapi")
    from dsmlkit.server.config import load_config_file

    config = tmp_path / "models.toml"
    config.write_text(f'[[models]]\nname = "m"\ndialect = "{alias}"\nupstream = "http://e/v1"\n')
    assert [model.dialect for model in load_config_file(str(config))] == [name]


def test_an_unknown_dialect_names_the_names_and_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    done = run_cli("parse", "--dialect", "v5")
    assert done.returncode == EXIT_USAGE
    assert all(name in done.stderr for name in (*DIALECTS, *DIALECT_ALIASES))
    monkeypatch.setenv("DSMLKIT_DIALECT", "v5")
    served = run_cli("serve")
    assert served.returncode == EXIT_USAGE and "DSMLKIT_DIALECT='v5'" in served.stderr


def test_parse_jsonl_names_each_bad_line_and_exits_3(tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"text": "ok"}\nnot json\n\n[1]\n{"text": "fine"}\n', "utf-8")
    done = run_cli("parse", "--jsonl", str(batch))
    assert done.returncode == EXIT_INPUT
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [result.get("line") for result in results] == [None, 2, 4, None]
    assert [result.get("content") for result in results] == ["ok", None, None, "fine"]
    assert done.stderr.splitlines() == [
        f"dsmlkit parse: {batch} line 2: not valid JSON: Expecting value at column 1",
        f"dsmlkit parse: {batch} line 4: each line must be a JSON object",
    ]


def test_parse_jsonl_reports_a_line_that_is_not_utf8(tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n')
    done = run_cli("parse", "--jsonl", str(batch))
    assert done.returncode == EXIT_INPUT
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [result.get("line") for result in results] == [None, 2]
    assert done.stderr.splitlines() == [
        f"dsmlkit parse: {batch} line 2: not UTF-8: invalid start byte at byte 10"
    ]


@pytest.mark.parametrize(
    ("argv", "content", "message"),
    [
        (["render", "--dialect", "v4"], '[\n  {"role": "user",}\n]', "line 2, column 19"),
        (["render", "--dialect", "v4"], " \n", "is empty; it must hold JSON"),
        (["parse", "--tools"], "", "is empty; it must hold JSON"),
        (["parse", "--tools"], "[1,,]", "is not valid JSON: Expecting value at line 1, column 4"),
    ],
)
def test_json_input_errors_name_the_file_and_where(
    argv: list[str], content: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "input.json"
    path.write_text(content, "utf-8")
    done = run_cli(*argv, str(path))
    assert done.returncode == EXIT_INPUT
    assert f"{path} " in done.stderr and message in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_convert_reports_an_empty_body_as_empty_in_the_apis_error_body() -> None:
    done = run_cli("convert", "--from", "anthropic", stdin="")
    assert done.returncode == EXIT_INPUT
    assert json.loads(done.stdout)["error"]["message"] == "stdin is empty; it must hold JSON"
