"""The ``dsmlkit`` command: ``parse``, ``render``, ``convert``, ``grammar`` and ``serve``.

Each subcommand lives in its own module with ``register(subparsers)`` (adds its
arguments and sets ``func``); the drivers are thin wrappers over the library.

Exit codes, the same for every subcommand (docs/cli.md):

==  ==========================================================================
0   success
1   internal error (a bug: please report it)
2   usage: a bad flag or ``DSMLKIT_*`` environment value (the message names it)
3   input: a file or stdin cannot be read or holds invalid data (named)
4   the server cannot start or its upstream engine is unusable
5   the ``--config`` file is invalid (the message names the file and key), or the
    settings do not fit together (``serve --workers N`` with a per-process ``--state``)
==  ==========================================================================
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from dsmlkit import __version__

SUBCOMMANDS = ("parse", "render", "convert", "grammar", "serve")

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_START = 4
EXIT_CONFIG = 5


class InputFileError(Exception):
    """A file named on the command line cannot be read or holds the wrong data (exit 3)."""


def read_input(path: str | None, flag: str = "") -> bytes:
    """The bytes of FILE, or of stdin when it is omitted or ``-``.

    Raises :class:`InputFileError` naming the file (and ``flag``, when it came from one).
    """
    if path is None or path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        prefix = f"{flag}: " if flag else ""
        raise InputFileError(f"{prefix}cannot read {path}: {exc.strerror or exc}") from exc


def load_tools(path: str) -> list[Any]:
    """The tools of a ``--tools FILE``: a JSON list of tools, or an object with ``"tools"``.

    Raises :class:`InputFileError` naming the file when it is unreadable, not JSON or of
    another shape.
    """
    raw = read_input(path, "--tools")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except ValueError as exc:
        raise InputFileError(f"--tools: {path} is not UTF-8 JSON: {exc}") from exc
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise InputFileError(
            f'--tools: {path} must hold a JSON list of tool objects or an object with "tools"'
        )
    return tools


def fail(command: str, message: str, code: int) -> int:
    """Print ``dsmlkit COMMAND: MESSAGE`` (one line) on stderr and return ``code``."""
    print(f"dsmlkit {command}: {' '.join(message.split())}", file=sys.stderr)
    return code


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``only``, just that subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="dsmlkit",
        description="DeepSeek DSML tool calling for V3.2, V4 and V4.1.",
    )
    parser.add_argument("--version", action="version", version=f"dsmlkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        module = importlib.import_module(f"dsmlkit.cli.{name}_cmd")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = arguments[0] if arguments and arguments[0] in SUBCOMMANDS else None
    args = build_parser(chosen).parse_args(arguments)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
