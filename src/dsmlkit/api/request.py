"""Entry points that take the API's name: for the CLI and the server's generic paths."""

from __future__ import annotations

from typing import Any

from dsmlkit.api.anthropic import parse_anthropic_request, read_anthropic_tools
from dsmlkit.api.common import Api, ChatRequest, ParseOptions
from dsmlkit.api.openai import parse_openai_request
from dsmlkit.api.responses import parse_responses_request, read_responses_tools
from dsmlkit.api.seal import Sealer
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.fields import Field
from dsmlkit.render import RenderCache, resolve_dialect
from dsmlkit.render.conversation import read_tools, unique_tools


def parse_request(
    api: Api,
    body: Any,
    *,
    dialect: str | Dialect = DEFAULT_DIALECT,
    sealer: Sealer | None = None,
    cache: RenderCache | None = None,
) -> ChatRequest:
    """Read a Chat Completions, Messages or Responses body; raises ``InvalidRequest``.

    ``sealer`` opens sealed reasoning in a Responses body (the other APIs have none);
    ``cache`` keeps the messages a Chat Completions body's reader read, for reuse.
    """
    if api == "responses":
        return parse_responses_request(body, dialect=dialect, sealer=sealer)
    if api == "anthropic":
        return parse_anthropic_request(body, dialect=dialect)
    return parse_openai_request(body, dialect=dialect, cache=cache)


def parse_options(
    api: Api, tools: Any, *, dialect: str | Dialect = DEFAULT_DIALECT
) -> ParseOptions:
    """How to read a model's output for a request that had ``tools`` (in ``api``'s form).

    The tools are read and checked exactly as that API's request reader reads them.
    """
    if api == "anthropic":
        typed, _ = read_anthropic_tools(Field(tools, "tools"), [])
    elif api == "responses":
        typed, _ = read_responses_tools(Field(tools, "tools"), [])
    else:
        typed = list(read_tools(Field(tools, "tools")))
    return ParseOptions(resolve_dialect(dialect), unique_tools(typed))


def convert_output(req: ChatRequest) -> dict[str, Any]:
    """What ``dsmlkit convert`` prints: ``{"messages", "tools", "options"}``."""
    conversation = req.conversation
    return {
        "messages": conversation.chat_messages(),
        "tools": conversation.chat_tools(),
        "options": req.options(),
    }


def to_openai_chat_body(req: ChatRequest) -> dict[str, Any]:
    """An OpenAI chat body for a hosted chat upstream.

    Thinking travels as ``chat_template_kwargs.thinking`` (what vLLM and SGLang read), not as
    a top-level field, which OpenAI-compatible endpoints reject or read as an object.
    """
    body: dict[str, Any] = {"model": req.model, **convert_output(req)}
    if not body["tools"]:
        del body["tools"]
    body.update(body.pop("options"))
    del body["thinking"]
    body["chat_template_kwargs"] = {"thinking": req.render.thinking}
    return body
