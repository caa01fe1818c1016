"""Forced tool calls: ``tool_choice`` ``required`` or a named function, and
``parallel_tool_calls: false``, enforced rather than only reported.

Completions mode (the options of :class:`~.readers.CompletionsReader`; the gateway writes
the prompt):

* **chat mode** (the prompt ends in content): the prompt ends with the call-block opener
  exactly as the model writes it (``\\n\\n<｜DSML｜ calls>\\n``), plus the invoke opener
  (``<｜DSML｜ invoke name="NAME">\\n``) for a named function. The same text is fed into the
  parser first, so the answer starts inside the block and the client sees the call open.
* **thinking mode** (the prompt ends with ``<think>``): the engine first reasons with
  ``</think>`` as a stop string, the reasoning streaming to the client as it comes; then a
  second upstream request continues the same prompt plus that reasoning, ``</think>`` and
  the opener, and its text continues the same parser.
* ``parallel_tool_calls: false``: the invoke closer is a stop string; when the engine stops
  there the gateway writes the closers itself, so the answer holds exactly one call.

Chat and messages mode (``--upstream-api chat`` / ``messages``) forward the request's own
``tool_choice``; see :func:`fallback_body` for endpoints that reject forced choices in
thinking mode.

This is the plan stage's part. In both modes, and for every API, the fold stage then
enforces the choice on what reaches the client, whatever the engine wrote
(:class:`~.fold.CallGate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsmlkit.api import ChatRequest
from dsmlkit.dialects import MARKER, Dialect
from dsmlkit.render.builder import Piece, PromptBuilder


def call_opener(dialect: Dialect, name: str | None) -> tuple[Piece, ...]:
    """The block opener (and the invoke opener for ``name``) as the model writes them."""
    out = PromptBuilder()
    out.template(f"\n\n{dialect.block_open()}\n")
    if name is not None:
        out.template(f'<{MARKER}{dialect.invoke} name="')
        out.text(name)
        out.template('">\n')
    return out.pieces()


def fallback_body(
    req: ChatRequest, body: dict[str, Any], auto: Any, tool_names: Sequence[str | None]
) -> dict[str, Any] | None:
    """What to send a hosted upstream that rejected a forced choice in thinking mode.

    DeepSeek's API (and endpoints like it) answer 400 to ``tool_choice`` ``required`` or a
    named function in thinking mode. The retry asks with ``auto`` (the choice in the
    upstream's spelling); for a named function only that tool is offered (``tool_names``:
    the name of each entry of ``body["tools"]``, in the upstream's spelling). None when
    the request forces nothing or does not think (then a 400 is the request's own problem).
    """
    if not (req.requires_call and req.render.thinking):
        return None
    retry = {**body, "tool_choice": auto}
    name = req.conversation.tool_choice.name
    if name is not None and isinstance(body.get("tools"), list):
        retry["tools"] = [
            tool for tool, named in zip(body["tools"], tool_names, strict=True) if named == name
        ]
    return retry
