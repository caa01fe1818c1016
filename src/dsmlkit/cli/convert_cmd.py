"""``dsmlkit convert``: show how an API request converts to dsmlkit's canonical form.

Reads an OpenAI Chat Completions, Anthropic Messages or OpenAI Responses request body
(FILE or stdin) and prints ``{"messages": [...], "tools": [...], "options": {...}}`` as
JSON on stdout.

Exit codes (the table in :mod:`dsmlkit.cli`): 0 converted; 3 FILE cannot be read (a
message on stderr) or the request is invalid (the message on stderr, and the API's own
error body, as JSON, on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dsmlkit.api import api_named, convert_output, parse_request
from dsmlkit.api.request import API_NAMES
from dsmlkit.cli import (
    DIALECT_HELP,
    DIALECT_METAVAR,
    EXIT_INPUT,
    EXIT_OK,
    InputFileError,
    dialect_name,
    fail,
    input_name,
    load_json,
    read_input,
)
from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.errors import InvalidRequest


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the canonical messages, tools and options of a request body; an invalid "
        "request prints the API's error body on stdout and exits 3."
    )
    parser.add_argument("--from", dest="api", required=True, choices=API_NAMES)
    parser.add_argument(
        "--dialect",
        type=dialect_name,
        metavar=DIALECT_METAVAR,
        default=DEFAULT_DIALECT.name,
        help=DIALECT_HELP,
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="request body (default: stdin)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        raw = read_input(args.file)
    except InputFileError as exc:
        return fail("convert", str(exc), EXIT_INPUT)
    source = input_name(args.file)
    try:
        body = _decode(raw, source)
    except InvalidRequest as err:  # its message names the input
        return _refuse(args.api, err, str(err))
    try:
        output = convert_output(parse_request(args.api, body, dialect=args.dialect))
    except InvalidRequest as err:
        return _refuse(args.api, err, f"{source}: {err}")
    _print_json(output)
    return EXIT_OK


def _refuse(api: str, err: InvalidRequest, message: str) -> int:
    """The API's error body for ``err`` on stdout, ``message`` on stderr: exit 3."""
    _print_json(api_named(api).error_body(err))
    return fail("convert", message, EXIT_INPUT)


def _decode(raw: bytes, source: str) -> Any:
    """The request body as JSON; what is wrong with it becomes the API's error body."""
    try:
        return load_json(raw, source)
    except InputFileError as exc:
        raise InvalidRequest(str(exc)) from None


def _print_json(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=1) + "\n")
