"""A typed request as an Anthropic Messages request, for a hosted ``/v1/messages`` upstream.

:func:`to_anthropic_body` writes the body ``dsmlkit serve --upstream-api messages`` sends
(:class:`MessagesHistory` writes its ``system`` and ``messages``):

* system and developer messages become the top-level ``system`` text (joined with blank
  lines, in order); a ``latest_reminder`` is a user text block at its place;
* an assistant turn is its ``thinking`` block (its reasoning, with the upstream's own
  ``signature`` when the gateway kept one, else an empty one), its text, the blocks kept
  whole (:class:`~dsmlkit.conversation.model.RawBlockPart`: a hosted endpoint's
  server-tool blocks) as they came, in their places in the text, and its ``tool_use``
  blocks (``input``: the arguments object);
* tool results are ``tool_result`` blocks of a user message (``is_error`` kept, tool
  references as ``tool_reference`` blocks); images are ``image`` blocks (a ``data:`` URL
  as a base64 source, any other as a URL source); consecutive messages of one role are
  one message, as the API combines them;
* tools are ``{name, description, input_schema}`` (``defer_loading`` and ``strict`` kept);
  ``tool_choice`` is ``auto`` / ``any`` / ``tool`` / ``none``, with
  ``disable_parallel_tool_use`` for ``parallel_tool_calls: false``;
* ``max_tokens`` (which the API requires) is the request's resolved budget; ``thinking``
  is enabled (``budget_tokens``: that budget less one, at least 1024, as the API asks) or
  disabled; a reasoning effort is ``output_config.effort``; ``temperature``, ``top_p``,
  ``top_k`` and the stop strings are kept, other sampling fields have no Anthropic name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsmlkit.api.common import ChatRequest
from dsmlkit.conversation.model import (
    HistoryCall,
    ImagePart,
    Message,
    Part,
    RawBlockPart,
    TextPart,
    Tool,
    ToolChoice,
    ToolReferencePart,
)

#: The smallest ``thinking.budget_tokens`` the Anthropic API takes.
MIN_THINKING_BUDGET = 1024
#: Sampling fields (OpenAI names in :attr:`ChatRequest.sampling`) Anthropic has too.
_SAMPLING = ("temperature", "top_p", "top_k")

Block = dict[str, Any]


def to_anthropic_body(req: ChatRequest) -> dict[str, Any]:
    """The Anthropic Messages body for ``req`` (see the module docstring); ``stream`` as
    the request has it."""
    history = MessagesHistory(req.conversation.messages)
    max_tokens = req.resolved_max_tokens()
    body: dict[str, Any] = {"model": req.model, "max_tokens": max_tokens}
    if history.system:
        body["system"] = history.system
    body["messages"] = history.messages
    conversation = req.conversation
    if conversation.tools:
        body["tools"] = [anthropic_tool(tool) for tool in conversation.tools]
        body["tool_choice"] = anthropic_tool_choice(
            conversation.tool_choice, req.parallel_tool_calls
        )
    if req.render.thinking:
        budget = max(MIN_THINKING_BUDGET, max_tokens - 1)
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    else:
        body["thinking"] = {"type": "disabled"}
    if req.render.reasoning_effort is not None:
        body["output_config"] = {"effort": req.render.reasoning_effort}
    body.update({name: req.sampling[name] for name in _SAMPLING if name in req.sampling})
    if req.stop_sequences:
        body["stop_sequences"] = list(req.stop_sequences)
    body["stream"] = req.stream
    return body


def anthropic_tool(tool: Tool) -> dict[str, Any]:
    """A tool as Anthropic declares it."""
    function = tool.function
    out: dict[str, Any] = {"name": tool.name}
    if isinstance(function.get("description"), str):
        out["description"] = function["description"]
    parameters = function.get("parameters")
    out["input_schema"] = dict(parameters) if isinstance(parameters, dict) else {"type": "object"}
    if isinstance(function.get("strict"), bool):
        out["strict"] = function["strict"]
    if tool.deferred:
        out["defer_loading"] = True
    return out


def anthropic_tool_choice(choice: ToolChoice, parallel: bool) -> dict[str, Any]:
    """``tool_choice`` in Anthropic's spelling."""
    if choice.mode == "none":
        return {"type": "none"}
    if choice.name is not None:
        out: dict[str, Any] = {"type": "tool", "name": choice.name}
    else:
        out = {"type": "any" if choice.mode == "required" else "auto"}
    if not parallel:
        out["disable_parallel_tool_use"] = True
    return out


class MessagesHistory:
    """A typed conversation as Anthropic's ``system`` text and ``messages`` list."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._system: list[str] = []
        self.messages: list[dict[str, Any]] = []
        for message in messages:
            self._add(message)

    @property
    def system(self) -> str:
        return "\n\n".join(self._system)

    def _add(self, message: Message) -> None:
        if message.role in ("system", "developer"):
            self._system.append(message.text())
        elif message.role == "assistant":
            self._append("assistant", self._assistant(message))
        elif message.role == "tool":
            self._append("user", [self._tool_result(message)])
        else:  # user, latest_reminder
            self._append("user", [self._part(part) for part in message.parts])

    def _append(self, role: str, blocks: list[Block]) -> None:
        """Add ``blocks`` as a ``role`` message, or to the last one when it has that role."""
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"] += blocks
        else:
            self.messages.append({"role": role, "content": blocks})

    def _assistant(self, message: Message) -> list[Block]:
        blocks: list[Block] = []
        if message.reasoning:
            signature = message.reasoning_signature or ""
            blocks.append(
                {"type": "thinking", "thinking": message.reasoning, "signature": signature}
            )
        texts: list[str] = []  # the run of text parts since the last raw block
        for part in message.parts:
            if isinstance(part, RawBlockPart):
                _end_run(texts, blocks)
                blocks.append(self._part(part))
            elif isinstance(part, TextPart):
                texts.append(part.text)
        _end_run(texts, blocks)
        blocks += [self._tool_use(call) for call in message.tool_calls]
        return blocks

    @staticmethod
    def _tool_use(call: HistoryCall) -> Block:
        return {
            "type": "tool_use",
            "id": call.id or "",
            "name": call.name,
            "input": dict(call.arguments),
        }

    def _tool_result(self, message: Message) -> Block:
        block: Block = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
        if message.plain:
            block["content"] = message.text()
        else:
            block["content"] = [self._part(part) for part in message.parts]
        if message.is_error:
            block["is_error"] = True
        return block

    @staticmethod
    def _part(part: Part) -> Block:
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.text}
        if isinstance(part, ToolReferencePart):
            return {"type": "tool_reference", "tool_name": part.name}
        if isinstance(part, RawBlockPart):
            return dict(part.block)
        return {"type": "image", "source": _image_source(part)}


def _end_run(texts: list[str], blocks: list[Block]) -> None:
    """A run of text parts as one text block, joined as :meth:`Message.text` joins them
    (none when empty); the run starts again."""
    text = "\n\n".join(texts)
    if text:
        blocks.append({"type": "text", "text": text})
    texts.clear()


def _image_source(image: ImagePart) -> dict[str, Any]:
    """A ``data:`` URL as a base64 source, any other URL as a URL source."""
    url = image.url or ""
    head, comma, data = url.partition(",")
    if url.startswith("data:") and comma and head.endswith(";base64"):
        return {"type": "base64", "media_type": head[5:-7], "data": data}
    return {"type": "url", "url": url}
