"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from tests.helpers import v41_tokenizer_file


@pytest.fixture(scope="session")
def v41_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The path of the tests' one V4.1 ``tokenizer.json`` (:func:`tests.helpers.v41_tokenizer_text`,
    which the fake engine tokenizes with too), alone in its folder (the folder's name is
    ``v41`` plus a number)."""
    return str(v41_tokenizer_file(tmp_path_factory.mktemp("v41")))
