"""Every exception dsmlkit raises on purpose is a DsmlkitError (errors.py's one hierarchy).

Reads every module's ``raise`` statements and resolves what each raises in that module's
namespace. Only argparse's own protocol for flag types and a private exception used for
control flow inside one module are raised otherwise.
"""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest

import dsmlkit
from dsmlkit.errors import DsmlkitError

SOURCE = Path(dsmlkit.__file__).parent
#: Raised on purpose but not DsmlkitErrors, and why.
ALLOWED: dict[object, str] = {
    argparse.ArgumentTypeError: "argparse's way for a flag's type function to refuse a value",
}
#: Private exceptions that never leave their module (caught where they are raised).
PRIVATE = {"_Rejected"}
#: Modules not imported here: ``__main__`` runs the command line; the plugins need an
#: engine (vLLM, SGLang, TensorRT-LLM) or LiteLLM installed.
NOT_IMPORTED = {
    "dsmlkit.__main__",
    "dsmlkit.integrations.vllm_plugin",
    "dsmlkit.integrations.vllm_entry",
    "dsmlkit.integrations.sglang_plugin",
    "dsmlkit.integrations.trtllm",
    "dsmlkit.integrations.litellm",
}


def _modules() -> dict[str, Path]:
    """Each module's name and its source file (read, not ``__file__``: a compiled module's
    is its extension)."""
    modules = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in NOT_IMPORTED:
            modules[name] = path
    return modules


MODULES = _modules()


def _dotted(node: ast.expr) -> bool:
    """``X`` or ``a.b.X``: a name that can be looked up in the module."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _raised(tree: ast.AST) -> list[tuple[int, ast.expr]]:
    """``(line, what)`` for each ``raise X`` / ``raise X(...)`` of a dotted name (a bare
    re-raise and ``raise field.error(...)``-style helper calls are left out)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if _dotted(target):
                found.append((node.lineno, target))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_every_raise_is_a_dsmlkit_error(name: str) -> None:
    module = importlib.import_module(name)
    path = MODULES[name]
    wrong = []
    for line, target in _raised(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(target, ast.Name) and target.id in PRIVATE:
            continue
        try:
            raised = eval(compile(ast.Expression(target), str(path), "eval"), vars(module))
        except (NameError, AttributeError):  # a local value (a caught error, a Field)
            continue
        if isinstance(raised, BaseException):
            raised = type(raised)
        if not isinstance(raised, type) or raised in ALLOWED:
            continue
        if not issubclass(raised, DsmlkitError):
            wrong.append(f"{path.name}:{line} raises {raised.__name__}")
    assert not wrong, wrong


def test_the_hierarchy_is_split_by_whose_fault() -> None:
    from dsmlkit.cli import InputFileError
    from dsmlkit.errors import CallerError, InternalError
    from dsmlkit.server.errors import UpstreamError
    from dsmlkit.server.state_store import StateStoreUnavailable

    assert issubclass(InputFileError, CallerError)
    for not_the_callers in (StateStoreUnavailable, UpstreamError, InternalError):
        assert issubclass(not_the_callers, DsmlkitError)
        assert not issubclass(not_the_callers, CallerError)
