"""The unit suite (``-m "not slow"``) starts no process: tests/conftest.py refuses one to a
test that is not marked slow, and lets a slow test start one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import UnmarkedProcess

COMMAND = [sys.executable, "-c", "pass"]


def test_a_test_not_marked_slow_cannot_start_a_process() -> None:
    with pytest.raises(UnmarkedProcess, match=r"mark it @pytest\.mark\.slow"):
        subprocess.run(COMMAND, check=True)


@pytest.mark.slow
def test_a_slow_test_may_start_one() -> None:
    assert subprocess.run(COMMAND, check=True).returncode == 0


def test_the_default_run_deselects_nothing(pytestconfig: pytest.Config) -> None:
    assert "-m" not in pytestconfig.getini("addopts")
    assert any(marker.startswith("slow:") for marker in pytestconfig.getini("markers"))
