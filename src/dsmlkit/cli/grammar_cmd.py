"""``dsmlkit grammar``: the DSML grammar of a tool set, as an xgrammar structural tag or EBNF."""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from dsmlkit.cli import (
    DIALECT_HELP,
    DIALECT_METAVAR,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    InputFileError,
    SubcommandParser,
    dialect_name,
    fail,
    load_tools,
)
from dsmlkit.errors import CallerError
from dsmlkit.grammar import ebnf, structural_tag

_PROG = "dsmlkit grammar"


class _OneLineErrors(SubcommandParser):
    """Usage errors as one line on stderr and the usage exit status."""

    def error(self, message: str) -> NoReturn:
        sys.exit(fail("grammar", message, EXIT_USAGE))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the grammar of what a DeepSeek model may write for these tools: an xgrammar "
        "structural tag as JSON (--format xgrammar) or xgrammar EBNF text (--format ebnf)."
    )
    parser.__class__ = _OneLineErrors  # add_parser() takes no class; errors become one line
    parser.add_argument(
        "--dialect", type=dialect_name, metavar=DIALECT_METAVAR, required=True, help=DIALECT_HELP
    )
    parser.add_argument(
        "--tools",
        required=True,
        metavar="FILE",
        help='JSON list of function tools, or an object with "tools" (- for stdin)',
    )
    parser.add_argument(
        "--tool-choice",
        default="auto",
        metavar="auto|required|none|NAME",
        help="auto: text, then at most one call block; required: text, then one block; "
        "none: text only; a tool's name: one call of that tool (default: auto)",
    )
    parser.add_argument(
        "--thinking",
        action="store_true",
        help="the output starts inside reasoning (the prompt ended with <think>)",
    )
    parser.add_argument("--no-parallel", action="store_true", help="at most one call in the block")
    parser.add_argument("--format", required=True, choices=("xgrammar", "ebnf"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The tool file is checked first, with every tool's grammar built (``auto``): what is
    wrong there is the file's (exit 3); what ``--tool-choice`` then adds is the flag's (2)."""
    try:
        tools = load_tools(args.tools)
    except InputFileError as exc:
        return fail("grammar", str(exc), EXIT_INPUT)
    build = ebnf if args.format == "ebnf" else structural_tag
    steps: list[tuple[str, str, int]] = [("auto", f"--tools: {args.tools}", EXIT_INPUT)]
    if args.tool_choice != "auto":
        steps.append((args.tool_choice, "--tool-choice", EXIT_USAGE))
    for tool_choice, where, code in steps:
        try:
            grammar = build(
                args.dialect,
                tools,
                tool_choice=tool_choice,
                thinking=args.thinking,
                parallel=not args.no_parallel,
            )
        except CallerError as exc:
            return fail("grammar", f"{where}: {exc}", code)
    text = grammar if isinstance(grammar, str) else json.dumps(grammar, ensure_ascii=False) + "\n"
    sys.stdout.buffer.write(text.encode("utf-8"))
    return EXIT_OK
