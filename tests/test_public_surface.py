"""The public surface: each package's ``__all__`` is short, sorted, importable, and the one
docs/architecture.md lists; the examples in README.md and docs/ import only public names."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.test_doc_examples import DOCS, examples

ROOT = Path(__file__).parent.parent
PACKAGES = [
    "dsmlkit",
    "dsmlkit.parse",
    "dsmlkit.conversation",
    "dsmlkit.render",
    "dsmlkit.grammar",
    "dsmlkit.api",
    "dsmlkit.server",
    "dsmlkit.integrations",
    "dsmlkit.cli",
]
MOST_NAMES = 25
SURFACE_ROW = re.compile(r"^\| `(dsmlkit[\w.]*)` \| (.*) \|$", re.MULTILINE)


def _exported(name: str) -> list[str]:
    names = importlib.import_module(name).__all__
    assert isinstance(names, list)
    return names


def _isort_key(name: str) -> tuple[int, list[str | int]]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then the rest, each in natural order."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def test_every_package_under_src_is_listed() -> None:
    found = {
        ".".join(path.parent.relative_to(ROOT / "src").parts)
        for path in (ROOT / "src" / "dsmlkit").rglob("__init__.py")
    }
    assert found == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_short_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    names = _exported(package)
    assert len(names) <= MOST_NAMES, f"{package}: {len(names)} names; draw a shorter surface"
    assert len(set(names)) == len(names)
    assert names == sorted(names, key=_isort_key)
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_star_import_gives_exactly_all(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    del namespace["__builtins__"]
    assert sorted(namespace) == sorted(_exported(package))


def test_architecture_lists_each_package_surface() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    listed = {
        package: re.findall(r"`([^`]+)`", cell) if cell.startswith("`") else []
        for package, cell in SURFACE_ROW.findall(text)
    }
    assert listed == {package: _exported(package) for package in PACKAGES}


def _doc_imports() -> list[tuple[str, str, str]]:
    """``(example id, module, name)`` for each ``from dsmlkit… import name`` in the docs'
    Python examples, skipped ones included."""
    found = []
    for path in DOCS:
        for example in examples(path):
            if example.language != "python":
                continue
            for node in ast.walk(ast.parse(example.code)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsmlkit"):
                    found += [(example.id, node.module or "", alias.name) for alias in node.names]
    return found


DOC_IMPORTS = _doc_imports()


def test_the_docs_import_from_dsmlkit() -> None:
    assert len(DOC_IMPORTS) >= 10


@pytest.mark.parametrize(("where", "module", "name"), DOC_IMPORTS)
def test_doc_examples_import_only_public_names(where: str, module: str, name: str) -> None:
    imported: ModuleType = importlib.import_module(module)
    assert not name.startswith("_") or name == "__version__", f"{where}: {module}.{name}"
    if hasattr(imported, "__path__") or hasattr(imported, "__all__"):  # a package
        assert name in imported.__all__, f"{where}: {name} is not in {module}.__all__"
    else:
        assert hasattr(imported, name), f"{where}: {module} has no {name}"
