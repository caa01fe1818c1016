"""dsmlkit's build backend: setuptools', except that ``DSMLKIT_COMPILE=1`` makes a wheel
with the render modules compiled by mypyc (setup.py): mypy joins the wheel's build
requirements, and only the wheel's build itself tells setup.py to compile. Everything else
(an sdist, an editable install, whose modules are the checkout's files so that an edit
applies at once) is pure Python, as it is without the variable.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: What compiling needs beside setuptools (mypyc ships with mypy).
COMPILER = "mypy>=1.10"
#: What this backend tells setup.py (which runs in this process) when it is to compile.
SETUP_COMPILES = "_DSMLKIT_SETUP_COMPILES"


def _compiling() -> bool:
    return os.environ.get("DSMLKIT_COMPILE") == "1"


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    requires = build_meta.get_requires_for_build_wheel(config_settings)
    return [*requires, COMPILER] if _compiling() else requires


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    os.environ[SETUP_COMPILES] = "1" if _compiling() else "0"
    try:
        return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
    finally:
        del os.environ[SETUP_COMPILES]
