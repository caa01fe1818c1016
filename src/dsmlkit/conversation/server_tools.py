"""Tools a hosted DeepSeek endpoint runs itself: their ``tools`` entries, carried as sent.

Since 2026-11-13 DeepSeek's API takes two server tools in ``tools`` (its guide "Web Tools",
api-docs.deepseek.com/guides/web_tools): ``{"type": "deepseek_web_search"}`` and
``{"type": "deepseek_read_url"}`` (Messages adds ``"name"``). The endpoint runs the searches
and page reads; the client shows the blocks it returns and passes them back unchanged on
the next request. No model output of ours can run them, so a request reader keeps each
entry whole (:class:`ServerTool`), and the upstream kind decides: sent on unchanged where
the upstream is such an endpoint and the client speaks its API (whose answers hold the
blocks), refused where the gateway renders the prompt itself or the client speaks
another API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsmlkit.errors import InvalidRequest
from dsmlkit.fields import Field

#: The ``type`` of each tool a hosted DeepSeek endpoint runs itself.
HOSTED_TOOL_TYPES = frozenset(("deepseek_web_search", "deepseek_read_url"))


@dataclass(frozen=True)
class ServerTool:
    """One ``tools`` entry of a tool the hosted endpoint runs: its ``type``, the entry as
    the client sent it (a parsed JSON object, never changed) and where the request gives
    it (``tools[1]``)."""

    type: str
    entry: Mapping[str, Any]
    param: str

    def not_rendered(self) -> InvalidRequest:
        """The 400 for a prompt the gateway renders itself: no engine of ours runs it."""
        return InvalidRequest(
            f"{self.type} is run by DeepSeek's hosted API, and this prompt is rendered for a "
            "self-hosted engine, which cannot run it; serve the model with --upstream-api chat "
            "(or messages) in front of DeepSeek's API, or leave the tool out",
            self.param,
        )

    def not_representable(self, api: str, upstream: str, route: str) -> InvalidRequest:
        """The 400 for a client ``api`` whose answers cannot hold the blocks an ``upstream``
        that speaks that API returns for it; ``route`` is the client route whose answers
        can."""
        return InvalidRequest(
            f"{self.type} returns blocks that a {api} answer cannot hold when the upstream "
            f"speaks {upstream}; send the request to {route}, or leave the tool out",
            self.param,
        )


def is_server_tool(entry: Any) -> bool:
    """Whether a ``tools`` entry is one of :data:`HOSTED_TOOL_TYPES`."""
    kind = entry.get("type") if isinstance(entry, Mapping) else None
    return isinstance(kind, str) and kind in HOSTED_TOOL_TYPES


def read_server_tools(tools: Field) -> tuple[ServerTool, ...]:
    """The server-tool entries of a request's ``tools`` list, in order (the other entries
    are the API reader's)."""
    if not isinstance(tools.value, list):
        return ()
    return tuple(
        ServerTool(item.value["type"], item.value, item.path)
        for item in tools.array()
        if is_server_tool(item.value)
    )
