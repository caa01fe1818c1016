"""Every python and bash example in README.md and docs/ runs as written.

An example that needs something a test cannot have (a package install, a server that runs
until stopped, an engine, a real agent client) is preceded by
``<!-- example: skip (the reason) -->`` and shows up here as skipped with that reason.
Python examples run in a fresh namespace; bash examples run with ``bash -e`` in an empty
temporary directory (the ``dsmlkit`` command is this checkout's, via ``python -m``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!-- example: skip \((.+)\) -->\s*$")


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    language: str
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def examples(path: Path) -> list[Example]:
    """The fenced python and bash blocks of one Markdown file."""
    found: list[Example] = []
    lines = path.read_text("utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        language = opened.group(1)
        if language in ("python", "bash"):
            marker = SKIP.match(lines[start - 1]) if start else None
            code = "\n".join(lines[start + 1 : i]) + "\n"
            found.append(Example(path, start + 1, language, code, marker and marker.group(1)))
        i += 1
    return found


EXAMPLES = [example for path in DOCS for example in examples(path)]


def test_the_docs_hold_examples_of_both_kinds() -> None:
    assert {e.language for e in EXAMPLES} == {"python", "bash"}
    assert sum(e.skip is None for e in EXAMPLES) >= 8


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs_as_written(example: Example, tmp_path: Path) -> None:
    if example.skip:
        pytest.skip(example.skip)
    if example.language == "python":
        exec(compile(example.code, example.id, "exec"), {"__name__": "__example__"})
        return
    shim = tmp_path / "bin" / "dsmlkit"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dsmlkit "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", example.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
