"""Request bodies as JSON that every reader downstream can take: a 400 for anything else.

Strict JSON only: ``NaN`` / ``Infinity`` and numbers too large for a float (``1e400``,
which Python's decoder makes infinite), bytes that are not UTF-8 (surrogates included,
which Python's decoder lets through), lone surrogate escapes (``"\\ud800"``, which no
UTF-8 encoder or tokenizer takes) and nesting deeper than :data:`MAX_DEPTH` are refused
with the path of the value, in the request's own syntax (a key that is not text shown
escaped).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import Request

from dsmlkit.errors import InvalidRequest
from dsmlkit.parse.arguments import LONE_SURROGATE
from dsmlkit.server.offload import run_for_body

#: Deepest nesting of arrays and objects accepted (JSON Schemas rarely pass 20).
MAX_DEPTH = 64


async def read_json(request: Request) -> tuple[Any, int]:
    """The request body as strict JSON, and its size in bytes; a 400 when it is not JSON
    (large bodies are decoded off the event loop: :func:`.offload.run_for_body`)."""
    raw = await request.body()
    return await run_for_body(len(raw), _decode_body, raw), len(raw)


class _NonFinite(float):
    """Marks a ``NaN`` / ``Infinity`` literal until the walk finds its path."""


def _non_finite(literal: str) -> float:
    return _NonFinite(literal.replace("Infinity", "inf"))


def _float(literal: str) -> float:
    """A number literal with a fraction or exponent: one past a float's range is marked."""
    value = float(literal)
    return value if math.isfinite(value) else _NonFinite(literal)


def _shown(key: str) -> str:
    """``key`` fit for an error's path: lone surrogates as their escapes (an answer
    holding one could not be encoded)."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def _decode_body(raw: bytes) -> Any:
    """The body as JSON; an :class:`InvalidRequest` (400) naming the path of what is refused."""
    if not raw.strip():
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        text = raw.decode(json.detect_encoding(raw))  # strict: no surrogates
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"the request body is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        data = json.loads(text, parse_constant=_non_finite, parse_float=_float)
    except RecursionError:
        raise InvalidRequest(
            f"is nested too deeply (more than {MAX_DEPTH} levels)", _too_deep(raw)
        ) from None
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    _check(data)
    return data


_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def _too_deep(raw: bytes) -> str | None:
    """The path of the first value nested deeper than :data:`MAX_DEPTH` in ``raw``
    (a body too deep for the decoder), found by a scan that stops there."""
    stack: list[list[Any]] = []  # [kind, key or index, expecting a key]
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        if token in (b"{", b"["):
            if len(stack) >= MAX_DEPTH:
                return _path_of(stack) or None
            stack.append(["obj", None, True] if token == b"{" else ["arr", 0, False])
        elif token in (b"}", b"]"):
            if stack:
                stack.pop()
        elif token == b",":
            if stack and stack[-1][0] == "arr":
                stack[-1][1] += 1
            elif stack:
                stack[-1][2] = True
        elif stack and stack[-1][2]:
            stack[-1][1] = _shown(json.loads(token.decode("utf-8", "replace")))
            stack[-1][2] = False
    return None


def _path_of(stack: list[list[Any]]) -> str:
    path = ""
    for kind, step, _ in stack:
        if kind == "arr":
            path += f"[{step}]"
        else:
            path += f".{step}" if path else str(step)
    return path


def _check(data: Any) -> None:
    """Walk ``data`` without recursion; the first refused value raises."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, _NonFinite):
            raise InvalidRequest(
                "must be a finite number (NaN, Infinity and numbers beyond 1.8e308 are refused)",
                path or None,
            )
        if isinstance(value, str):
            if LONE_SURROGATE.search(value):
                raise InvalidRequest(
                    "holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is not text",
                    path or None,
                )
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise InvalidRequest(
                f"is nested too deeply (more than {MAX_DEPTH} levels)", path or None
            )
        if isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
            continue
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if LONE_SURROGATE.search(key):
                raise InvalidRequest(
                    "a key holds a lone UTF-16 surrogate escape, which is not text",
                    _shown(child),
                )
            stack.append((item, child, depth + 1))
