"""``dsmlkit render``: print the exact DeepSeek prompt for a conversation.

Input (FILE or stdin, UTF-8 JSON): a list of messages, or an object with ``messages`` and
optionally ``tools``, ``thinking_mode``, ``reasoning_effort`` and ``context`` (the form of the
reference encoders' test inputs; ``context`` must be null). With ``--api
openai|anthropic|responses`` the input is a full Chat Completions, Messages or Responses
request body, converted by :mod:`dsmlkit.api`.

Precedence: a flag given on the command line wins over the same setting in the input
(``thinking_mode``/``reasoning_effort`` of the object form, or the request body's own
thinking, effort and prefill settings); what neither gives takes the renderer's default.

Output: the prompt, byte for byte as UTF-8, nothing added. ``--tokens`` prints JSON
``{"prompt", "token_ids", "output_starts_in"}`` instead.

Exit codes (the table in :mod:`dsmlkit.cli`): 0 success; 2 a bad flag or option value;
3 FILE or the ``--tokenizer`` path cannot be read, or the conversation is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import replace
from typing import Any

from dsmlkit.api import parse_request
from dsmlkit.api.request import API_NAMES
from dsmlkit.cli import (
    DIALECT_HELP,
    DIALECT_METAVAR,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    InputFileError,
    dialect_name,
    fail,
    input_name,
    load_json,
    read_input,
)
from dsmlkit.conversation import Conversation, build_conversation
from dsmlkit.dialects import Dialect
from dsmlkit.encoding import Encoding
from dsmlkit.errors import DsmlkitError, InvalidRequest, UsageError
from dsmlkit.render import RenderOptions, RenderResult
from dsmlkit.render.renderer import resolve_dialect, thinking_of

PROG = "dsmlkit render"
#: Keys of the object input form (the reference encoders' test-input layout).
INPUT_KEYS = ("messages", "tools", "thinking_mode", "reasoning_effort", "context")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Render a conversation into the exact DeepSeek prompt text (or token ids)."
    parser.epilog = "Flags given explicitly win over settings carried by the input."
    parser.add_argument(
        "--dialect", type=dialect_name, metavar=DIALECT_METAVAR, required=True, help=DIALECT_HELP
    )
    parser.add_argument("--mode", choices=("thinking", "chat"), help="default: thinking")
    parser.add_argument(
        "--reasoning-effort",
        metavar="E",
        help="an effort name (low, medium, high, xhigh, max) or, for v4.1, an integer 1-100",
    )
    parser.add_argument(
        "--effort-table",
        metavar="NAME",
        help="the checkpoint's effort table: v4 preview|0731, v4.1 release (default)|preview",
    )
    parser.add_argument(
        "--keep-thinking", action="store_true", help="keep the reasoning of earlier turns"
    )
    parser.add_argument("--no-bos", action="store_true", help="leave out the BOS token")
    parser.add_argument(
        "--no-generation-prompt",
        action="store_true",
        help="end after the last message instead of opening the assistant turn",
    )
    parser.add_argument("--tool-reference", choices=("name", "schema"))
    parser.add_argument(
        "--api",
        choices=API_NAMES,
        help="the input is a full request body of this API",
    )
    parser.add_argument(
        "--tokens",
        action="store_true",
        help='print JSON {"prompt", "token_ids", "output_starts_in"}',
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json or model folder for --tokens (default: the bundled V4 tokenizer)",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="input JSON (default: stdin)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.tokenizer and not args.tokens:
            raise UsageError("--tokenizer needs --tokens")
        raw = read_input(args.file)
        conversation, options = _conversation(args, raw)
        result = Encoding(options.dialect).render(conversation, options)
        output = _token_json(result, args.tokenizer) if args.tokens else result.prompt
    except UsageError as exc:
        return fail("render", str(exc), EXIT_USAGE)
    except DsmlkitError as exc:  # an InputFileError among them
        return fail("render", str(exc), EXIT_INPUT)
    sys.stdout.buffer.write(output.encode("utf-8"))
    sys.stdout.buffer.flush()
    return EXIT_OK


def _conversation(args: argparse.Namespace, raw: bytes) -> tuple[Conversation, RenderOptions]:
    """The conversation and render options from the input and the flags (flags win)."""
    body = load_json(raw, input_name(args.file))
    dialect = resolve_dialect(args.dialect)
    if args.api:
        req = parse_request(args.api, body, dialect=dialect)
        conversation, options = req.conversation, req.render
    else:
        conversation, options = _plain_input(body, dialect)
    return conversation, replace(options, **_flag_options(args))


def _plain_input(body: Any, dialect: Dialect) -> tuple[Conversation, RenderOptions]:
    if isinstance(body, list):
        return build_conversation(body), RenderOptions(dialect)
    if not isinstance(body, dict) or "messages" not in body:
        raise InvalidRequest(
            "the input must be a JSON list of messages or an object with 'messages'", "messages"
        )
    unknown = sorted(set(body) - set(INPUT_KEYS))
    if unknown:
        raise InvalidRequest(
            f"unknown input keys {unknown}; the object form takes {list(INPUT_KEYS)}", unknown[0]
        )
    if body.get("context") is not None:
        raise InvalidRequest(
            "'context' (messages already encoded earlier) is not supported; "
            "put those messages at the start of 'messages'",
            "context",
        )
    mode = body.get("thinking_mode")
    options = RenderOptions(
        dialect,
        thinking=True if mode is None else thinking_of(mode),
        reasoning_effort=body.get("reasoning_effort"),
    )
    return build_conversation(body["messages"], body.get("tools")), options


def _flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """The render options the command line sets explicitly (``RenderOptions`` fields)."""
    options: dict[str, Any] = {}
    if args.mode is not None:
        options["thinking"] = thinking_of(args.mode)
    if args.reasoning_effort is not None:
        effort = args.reasoning_effort.strip()
        options["reasoning_effort"] = int(effort) if effort.isdigit() else effort
    if args.effort_table is not None:
        options["effort_table"] = args.effort_table
    if args.keep_thinking:
        options["drop_thinking"] = False
    if args.no_bos:
        options["add_bos"] = False
    if args.no_generation_prompt:
        options["add_generation_prompt"] = False
    if args.tool_reference is not None:
        options["tool_reference"] = args.tool_reference
    return options


def _token_json(result: RenderResult, tokenizer_path: str | None) -> str:
    from dsmlkit.render.tokens import load_tokenizer

    try:
        tokenizer = load_tokenizer(tokenizer_path)
    except InvalidRequest as exc:
        raise InputFileError(f"--tokenizer: {exc.message}") from exc
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        token_ids = tokenizer.encode_prompt(result)
    for warning in caught:
        print(f"{PROG}: warning: {warning.message}", file=sys.stderr)
    document = {
        "prompt": result.prompt,
        "token_ids": token_ids,
        "output_starts_in": result.output_starts_in,
    }
    return json.dumps(document, ensure_ascii=False)
