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
5   the ``--config`` file is invalid (the message names the file and key)
==  ==========================================================================
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dsmlkit import __version__

SUBCOMMANDS = ("parse", "render", "convert", "grammar", "serve")

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_START = 4
EXIT_CONFIG = 5


def read_input(path: str | None) -> bytes:
    """The bytes of FILE, or of stdin when it is omitted or ``-`` (raises ``OSError``)."""
    if path is None or path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as handle:
        return handle.read()


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
