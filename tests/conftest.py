"""Fixtures and hooks shared by every test directory.

``slow`` (registered in pyproject.toml) marks a test that starts a process or takes over a
second; ``python3 -m pytest -m "not slow"`` runs the rest, the unit suite. A test that is
not marked slow and starts a process (``serve_process``, Redis, a browser, the CLI through
``subprocess``) fails with :class:`UnmarkedProcess` naming the command, so the unit suite
never starts one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Generator
from typing import Any

import pytest

from tests.helpers import v41_tokenizer_file


class UnmarkedProcess(AssertionError):
    """A test that is not marked slow started a process."""


class _RefusedPopen(subprocess.Popen[Any]):
    """What ``subprocess.Popen`` is while a test not marked slow runs: it starts nothing."""

    def __init__(self, args: Any, *rest: Any, **options: Any) -> None:
        self._child_created = False  # what Popen.__del__ reads
        raise UnmarkedProcess(
            f"this test starts a process ({args!r}): mark it @pytest.mark.slow "
            "(or its module: pytestmark = pytest.mark.slow)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Setup, call and teardown of a test not marked slow run with processes refused."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", _RefusedPopen)
        return (yield)


@pytest.fixture(scope="session")
def v41_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The path of the tests' one V4.1 ``tokenizer.json`` (:func:`tests.helpers.v41_tokenizer_text`,
    which the fake engine tokenizes with too), alone in its folder (the folder's name is
    ``v41`` plus a number)."""
    return str(v41_tokenizer_file(tmp_path_factory.mktemp("v41")))
