"""The docs stand alone: every relative link resolves inside the repository, and no text in
it points at files beside the checkout (the project's shared folder, the build machine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.test_doc_examples import DOCS, ROOT

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
#: Provenance notes may name where a copy came from; nothing else may point outside.
PROVENANCE = ("SOURCE.md",)
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.])[/]work/")


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    targets = [t for t in LINK.findall(doc.read_text("utf-8")) if "://" not in t]
    missing = [t for t in targets if not (doc.parent / t).resolve().is_file()]
    outside = [t for t in targets if ROOT not in (doc.parent / t).resolve().parents]
    assert not missing and not outside, (missing, outside)


def _listed() -> list[str]:
    """The files git lists in the checkout; in an unpacked sdist (no git), every file."""
    if not (ROOT / ".git").exists():
        return [str(path.relative_to(ROOT)) for path in ROOT.rglob("*") if path.is_file()]
    return subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.mark.slow
def test_no_tracked_text_points_outside_the_checkout() -> None:
    found = []
    for name in _listed():
        path = ROOT / name
        if path.name in PROVENANCE or path.suffix not in {".md", ".py", ".toml", ""}:
            continue
        if path.is_file():
            text = path.read_text("utf-8", errors="replace")
            found += [f"{name}: {m.group()}" for m in OUTSIDE.finditer(text)]
    assert not found, found
