"""Entry points that take the API's name: for the CLI and the server's generic paths."""

from __future__ import annotations

from typing import Any, Literal

from dsmlkit.api.anthropic import parse_anthropic_request
from dsmlkit.api.common import ChatRequest
from dsmlkit.api.openai import parse_openai_request
from dsmlkit.dialects import Dialect

READERS = {"openai": parse_openai_request, "anthropic": parse_anthropic_request}


def parse_request(
    api: Literal["openai", "anthropic"], body: Any, *, dialect: str | Dialect = "v4.1"
) -> ChatRequest:
    """Read an OpenAI Chat Completions or Anthropic Messages body; raises ``ApiError``."""
    return READERS[api](body, dialect=dialect)


def request_to_render_input(
    api: Literal["openai", "anthropic"], body: Any, *, dialect: str | Dialect = "v4.1"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """``(messages, tools, render_kwargs)`` for ``render(messages, tools, **render_kwargs)``."""
    req = parse_request(api, body, dialect=dialect)
    return req.messages, req.tools, req.render_kwargs


def convert_output(req: ChatRequest) -> dict[str, Any]:
    """What ``dsmlkit convert`` prints: ``{"messages", "tools", "options"}``."""
    return {"messages": req.messages, "tools": req.tools, "options": req.options()}


def to_openai_chat_body(req: ChatRequest) -> dict[str, Any]:
    """An OpenAI chat body for a hosted chat upstream.

    Thinking travels as ``chat_template_kwargs.thinking`` (what vLLM and SGLang read), not as
    a top-level field, which OpenAI-compatible endpoints reject or read as an object.
    """
    body: dict[str, Any] = {"model": req.model, "messages": req.messages}
    if req.tools:
        body["tools"] = req.tools
    body.update(req.options())
    del body["thinking"]
    body["chat_template_kwargs"] = {"thinking": req.thinking}
    return body
