"""The client APIs by name, and the entry points that take an API's name: for the CLI,
the server, library users and the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsmlkit.api.anthropic import MESSAGES
from dsmlkit.api.common import ChatRequest, ClientApi, ParseOptions, ReadContext
from dsmlkit.api.openai import CHAT
from dsmlkit.api.responses import RESPONSES
from dsmlkit.api.seal import Sealer
from dsmlkit.conversation.normalize import unique_tools
from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.errors import CallerError
from dsmlkit.render import RenderCache
from dsmlkit.render.renderer import resolve_dialect

#: Every client API; the server's routes and the CLI's choices are read from here.
APIS: tuple[ClientApi[Any], ...] = (CHAT, MESSAGES, RESPONSES)

#: Every name an API is known by (its name, then its aliases), in :data:`APIS` order.
API_NAMES = tuple(name for api in APIS for name in api.names)

#: An API, or one of its names.
ApiRef = str | ClientApi[Any]


def api_named(api: ApiRef) -> ClientApi[Any]:
    """The API named ``api`` (``chat``/``openai``, ``messages``/``anthropic``,
    ``responses``); an API object is returned as it is."""
    if isinstance(api, ClientApi):
        return api
    found = next((each for each in APIS if api in each.names), None)
    if found is None:
        raise CallerError(f"unknown API {api!r}; expected one of {', '.join(API_NAMES)}")
    return found


def parse_request(
    api: ApiRef,
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
    req: ChatRequest = api_named(api).read(body, ReadContext(dialect, sealer, cache))
    return req


def parse_options(
    api: ApiRef, tools: Any, *, dialect: str | Dialect = DEFAULT_DIALECT
) -> ParseOptions:
    """How to read a model's output for a request that had ``tools`` (in ``api``'s form).

    The tools are read and checked exactly as that API's request reader reads them.
    """
    return ParseOptions(resolve_dialect(dialect), unique_tools(api_named(api).read_tools(tools)))


def call_id_factory(api: ApiRef, token: Callable[[], str] | None = None) -> Callable[[], str]:
    """Fresh tool-call ids: ``call_…`` (both OpenAI APIs) or ``toolu_…`` (Anthropic).

    ``token`` makes the part after the prefix (default: 24 random hex digits).
    """
    return api_named(api).call_ids(token)


def convert_output(req: ChatRequest) -> dict[str, Any]:
    """What ``dsmlkit convert`` prints: ``{"messages", "tools", "options"}``; the tools a
    hosted endpoint runs come after the others, each entry as sent."""
    conversation = req.conversation
    return {
        "messages": conversation.chat_messages(),
        "tools": conversation.chat_tools() + [dict(tool.entry) for tool in req.server_tools],
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
