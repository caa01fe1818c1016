"""The ``dsmlkit`` command: ``parse``, ``render``, ``convert``, ``grammar`` and ``serve``.

Each subcommand lives in its own module with ``configure(parser)`` (adds its arguments
and sets ``func``), imported only when that subcommand runs, so ``dsmlkit --version`` and
``dsmlkit --help`` import none of them; the drivers are thin wrappers over the library.

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
import difflib
import importlib
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from dsmlkit._version import __version__
from dsmlkit.dialects import DIALECT_ALIASES, DIALECTS, get_dialect
from dsmlkit.errors import CallerError

#: The entry point (``dsmlkit = "dsmlkit.cli:main"``). The helpers below are shared by the
#: subcommand modules and are not part of the package's surface.
__all__ = ["main"]

#: Each subcommand and its one-line help (its module is ``dsmlkit.cli.<name>_cmd``).
SUBCOMMANDS = {
    "parse": "parse one raw DeepSeek model output into content, reasoning and tool calls",
    "render": "print the exact DeepSeek prompt for a conversation",
    "convert": "convert an OpenAI Chat, Anthropic or OpenAI Responses request body to the "
    "canonical conversation",
    "grammar": "print the DSML grammar of a tool set for constrained decoding",
    "serve": "serve render/tokenize/parse endpoints and, with --upstream, a DSML gateway",
}

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_START = 4
EXIT_CONFIG = 5


class InputFileError(CallerError):
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


def input_name(path: str | None) -> str:
    """How messages name the input of :func:`read_input`: the path, or ``stdin``."""
    return "stdin" if path is None or path == "-" else path


def load_tools(path: str) -> list[Any]:
    """The tools of a ``--tools FILE``: a JSON list of tools, or an object with ``"tools"``.

    Raises :class:`InputFileError` naming the file when it is unreadable, not JSON or of
    another shape.
    """
    data = load_json(read_input(path, "--tools"), f"--tools: {path}")
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise InputFileError(
            f'--tools: {path} must hold a JSON list of tool objects or an object with "tools"'
        )
    return tools


def load_json(raw: bytes, source: str) -> Any:
    """``raw`` decoded as UTF-8 JSON (a BOM allowed); ``source`` names it in the error.

    Raises :class:`InputFileError` saying that the input is empty, is not UTF-8, or where
    its JSON syntax breaks (line and column).
    """
    if not raw.strip():
        raise InputFileError(f"{source} is empty; it must hold JSON")
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{source} is not UTF-8: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc


def dialect_name(text: str) -> str:
    """The argparse ``type`` of every ``--dialect`` (and ``DSMLKIT_DIALECT``): a dialect
    name or one of its aliases (:data:`dsmlkit.dialects.DIALECT_ALIASES`), as its name."""
    try:
        return get_dialect(text).name
    except CallerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: ``metavar`` and ``help`` of every ``--dialect`` flag.
DIALECT_METAVAR = "{" + ",".join(DIALECTS) + "}"
DIALECT_HELP = "DSML dialect; also accepted: " + ", ".join(DIALECT_ALIASES)


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: arguments it does not know are its own usage error (exit 2),
    with the closest option it has, instead of the top-level parser's."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggestion(extras)}")
        return parsed, extras

    def _suggestion(self, extras: list[str]) -> str:
        options = [option for action in self._actions for option in action.option_strings]
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def fail(command: str, message: str, code: int) -> int:
    """Print ``dsmlkit COMMAND: MESSAGE`` (one line) on stderr and return ``code``."""
    print(f"dsmlkit {command}: {' '.join(message.split())}", file=sys.stderr)
    return code


def build_parser(configure: Iterable[str] = SUBCOMMANDS) -> argparse.ArgumentParser:
    """The argument parser, with the arguments of the subcommands in ``configure`` (only
    their modules are imported); the others are listed with their help alone."""
    parser = argparse.ArgumentParser(
        prog="dsmlkit",
        description="DeepSeek DSML tool calling for V3.2, V4 and V4.1.",
    )
    parser.add_argument("--version", action="version", version=f"dsmlkit {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=SubcommandParser
    )
    chosen = set(configure)
    for name, help_text in SUBCOMMANDS.items():
        subparser = subparsers.add_parser(name, help=help_text)
        if name in chosen:
            importlib.import_module(f"dsmlkit.cli.{name}_cmd").configure(subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = arguments[:1] if arguments and arguments[0] in SUBCOMMANDS else []
    args = build_parser(chosen).parse_args(arguments)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
