"""``dsmlkit parse``: raw model output in, the parsed message (or its events) out as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from dsmlkit.cli import (
    DIALECT_HELP,
    DIALECT_METAVAR,
    EXIT_INPUT,
    EXIT_OK,
    InputFileError,
    dialect_name,
    fail,
    input_name,
    load_tools,
    read_input,
)
from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.encoding import Encoding
from dsmlkit.errors import CallerError
from dsmlkit.parse import MessageCollector, Parser, StartIn, event_to_json


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read one raw model output (FILE or stdin) and print the parsed message as one JSON "
        'object {"content", "reasoning", "calls", "diagnostics", "finish_reason"}. '
        "With --jsonl, read one JSON request per line (FILE or stdin) and write one result "
        "per line; --dialect, --thinking, --strict, --tools, --chunk-size and "
        "--finish-reason are the defaults for the keys a line leaves out."
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="model output (default: stdin)")
    parser.add_argument(
        "--dialect",
        type=dialect_name,
        metavar=DIALECT_METAVAR,
        default=DEFAULT_DIALECT.name,
        help=DIALECT_HELP,
    )
    parser.add_argument(
        "--thinking",
        action="store_true",
        help="the output starts inside reasoning (the prompt ended with <think>)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="accept only this dialect's tag spellings"
    )
    parser.add_argument("--tools", metavar="FILE", help="JSON list of the request's tools")
    parser.add_argument(
        "--chunk-size",
        type=_positive_int,
        metavar="N",
        help="feed the text in N-character deltas (the result must not change)",
    )
    parser.add_argument(
        "--finish-reason",
        choices=("stop", "length"),
        help="the engine's finish reason, handed to close()",
    )
    parser.add_argument(
        "--events", action="store_true", help="print the event stream, one JSON object per line"
    )
    parser.add_argument(
        "--jsonl",
        action="store_true",
        help="batch mode: one JSON request per line of FILE or stdin",
    )
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _chunks(text: str, size: int | None) -> Iterator[str]:
    if not size or size >= len(text):
        return iter((text,))
    # map() over slices: no Python frame per delta, so the CLI adds little to the parser's cost.
    bounds = map(slice, range(0, len(text), size), range(size, len(text) + size, size))
    return map(text.__getitem__, bounds)


def _write_line(out: BinaryIO, data: Any) -> None:
    out.write(json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n")


def _new_parser(*, dialect: str, thinking: bool, strict: bool, tools: Any) -> Parser:
    """A parser for one output; a :class:`CallerError` for a bad dialect or tool list."""
    start_in: StartIn = "reasoning" if thinking else "content"
    return Encoding.named(dialect).parser(start_in, strict=strict, tools=tools)


def _parse_one(
    parser: Parser, chunks: Iterator[str] | list[str], finish_reason: str | None
) -> dict[str, Any]:
    collector = MessageCollector()
    feed, add = parser.feed, collector.add
    for chunk in chunks:
        add(feed(chunk))
    add(parser.close(finish_reason))
    return collector.message().to_json()


def run(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    try:
        tools = load_tools(args.tools) if args.tools else None
        raw = read_input(args.file)
    except InputFileError as exc:
        return fail("parse", str(exc), EXIT_INPUT)
    if args.jsonl:  # --tools is each line's default: a line that uses a bad one fails
        return _run_jsonl(out, raw, args, tools)
    try:
        parser = _new_parser(
            dialect=args.dialect, thinking=args.thinking, strict=args.strict, tools=tools
        )
    except CallerError as exc:
        return fail("parse", f"--tools: {args.tools}: {exc}", EXIT_INPUT)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return fail("parse", f"{input_name(args.file)} is not UTF-8: {exc}", EXIT_INPUT)
    if args.events:
        for chunk in _chunks(text, args.chunk_size):
            for event in parser.feed(chunk):
                _write_line(out, event_to_json(event))
        for event in parser.close(args.finish_reason):
            _write_line(out, event_to_json(event))
        return EXIT_OK
    _write_line(out, _parse_one(parser, _chunks(text, args.chunk_size), args.finish_reason))
    return EXIT_OK


def _run_jsonl(out: BinaryIO, raw: bytes, args: argparse.Namespace, tools: Any) -> int:
    """One result line per request line; the flags fill in what a line leaves out.

    A line that fails gives ``{"error", "line"}`` in its place and a stderr line naming the
    input and line number; the run goes on and exits 3 if any line failed.
    """
    source = input_name(args.file)
    code = EXIT_OK
    for number, raw_line in enumerate(raw.split(b"\n"), start=1):
        if not raw_line.strip():
            continue
        try:
            result = _parse_request(_line_json(raw_line), args, tools)
        except CallerError as exc:  # a bad line reports and the run goes on
            message = str(exc)
            code = fail("parse", f"{source} line {number}: {message}", EXIT_INPUT)
            result = {"error": message, "line": number}
        _write_line(out, result)
    return code


def _line_json(raw_line: bytes) -> Any:
    try:
        text = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CallerError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:  # its "line 1" would only confuse
        raise CallerError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None


def _parse_request(request: Any, defaults: argparse.Namespace, tools: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise CallerError("each line must be a JSON object")
    text = request.get("text")
    if not isinstance(text, str):
        raise CallerError('"text" must be a string')
    chunks = request.get("chunks")
    if chunks is not None:
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            raise CallerError('"chunks" must be a list of strings')
        if "".join(chunks) != text:
            raise CallerError('"chunks" must concatenate to "text"')
        pieces: Iterator[str] | list[str] = chunks
    else:
        size = request.get("chunk_size", defaults.chunk_size)
        if size is not None and (not isinstance(size, int) or size < 1):
            raise CallerError('"chunk_size" must be a positive integer')
        pieces = _chunks(text, size)
    finish = request.get("finish_reason", defaults.finish_reason)
    if finish is not None and not isinstance(finish, str):
        raise CallerError('"finish_reason" must be a string')
    parser = _new_parser(
        dialect=request.get("dialect") or defaults.dialect,
        thinking=bool(request.get("thinking", defaults.thinking)),
        strict=bool(request.get("strict", defaults.strict)),
        tools=request.get("tools", tools),
    )
    return _parse_one(parser, pieces, finish)
