"""Forced tool calls: ``tool_choice`` ``required`` or a named function, and
``parallel_tool_calls: false``, enforced rather than only reported.

Completions mode (:class:`CompletionsAnswer`, the gateway writes the prompt):

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

Chat mode (``--upstream-api chat``) forwards the request's own ``tool_choice``; see
:func:`chat_fallback_body` for endpoints that reject forced choices in thinking mode.

This is the plan stage's part. In both modes, and for every API, the fold stage then
enforces the choice on what reaches the client, whatever the engine wrote
(:class:`~.fold.CallGate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dsmlkit.api import ChatRequest
from dsmlkit.dialects import MARKER, THINK_CLOSE, Dialect
from dsmlkit.parse import (
    Event,
    ReasoningEnd,
    ToolCallStart,
)
from dsmlkit.render import RenderResult
from dsmlkit.render.builder import Piece, PromptBuilder
from dsmlkit.render.tokens import PromptTokenizer

Prompt = list[int] | str
#: ``make_body(prompt, extra_stop)``: the upstream request body for a prompt.
BodyMaker = Callable[[Prompt, Sequence[str]], dict[str, Any]]
#: ``resume(finish, stop_reason, completion_tokens)`` after an upstream stream ends: events
#: to add and the next upstream body (None: the answer is complete).
Resume = Callable[[str, str | None, int], tuple[list[Event], dict[str, Any] | None]]


def call_opener(dialect: Dialect, name: str | None) -> tuple[Piece, ...]:
    """The block opener (and the invoke opener for ``name``) as the model writes them."""
    out = PromptBuilder()
    out.template(f"\n\n{dialect.block_open()}\n")
    if name is not None:
        out.template(f'<{MARKER}{dialect.invoke} name="')
        out.text(name)
        out.template('">\n')
    return out.pieces()


def _text(pieces: Sequence[Piece]) -> str:
    return "".join(text for text, _ in pieces)


class CompletionsAnswer:
    """One completions-mode answer: the upstream bodies it needs and the parser it feeds.

    ``body`` is the first upstream request; ``opening`` the events of text the gateway
    wrote into the answer before the engine's first token. After each upstream stream,
    :meth:`resume` says what to add and whether another upstream request follows.
    """

    def __init__(
        self,
        req: ChatRequest,
        prompt: Prompt,
        result: RenderResult,
        tokenizer: PromptTokenizer | None,
        make_body: BodyMaker,
    ) -> None:
        self._req = req
        self._dialect = req.render.dialect
        self._tokenizer = tokenizer
        self._make_body = make_body
        self._one_call = req.one_call_only
        name = req.conversation.tool_choice.name
        self._opener = call_opener(self._dialect, name) if req.requires_call else ()
        starts_in = result.output_starts_in
        self.parser = req.output_parser(result)
        self._fed: list[str] = []  # all text given to the parser (kept when one call only)
        self._stage: list[str] = []  # the engine's text in this upstream request
        self._call_seen = False
        self._reasoning_ended = starts_in != "reasoning"
        self._prompt = prompt
        #: Reasoning first, then a second request that opens the call block.
        self._thinking_first = bool(self._opener) and starts_in == "reasoning"
        self.opening: list[Event] = []
        if self._opener and not self._thinking_first:
            self._prompt = self._extended(self._opener)
            self.opening = self._feed_own(_text(self._opener))
        extra = [THINK_CLOSE] if self._thinking_first else []
        self.body = make_body(self._prompt, extra + self._one_call_stop())

    def feed(self, text: str) -> list[Event]:
        """Events for the engine's next text."""
        self._stage.append(text)
        return self._feed_own(text)

    def resume(
        self, finish: str, stop_reason: str | None, completion_tokens: int
    ) -> tuple[list[Event], dict[str, Any] | None]:
        """After an upstream stream ended normally: events to add, and the next upstream
        body (None: the answer is complete, close the parser).

        The second request of thinking mode follows only a normal stop while the answer is
        still in reasoning with no call (an engine that ignored the ``</think>`` stop and
        answered on is not asked again; the missing call is reported as usual).
        """
        if finish != "stop" or stop_reason in self._req.stop_sequences:
            return [], None  # cut off, or the client's own stop string
        if self._thinking_first and not (self._call_seen or self._reasoning_ended):
            return self._open_call_after_reasoning(completion_tokens)
        if self._one_call and self._inside_invoke():
            closers = f"{self._dialect.invoke_close()}\n{self._dialect.block_close()}"
            return self._feed_own(closers), None
        return [], None

    def _open_call_after_reasoning(
        self, completion_tokens: int
    ) -> tuple[list[Event], dict[str, Any]]:
        """Stage two: the prompt plus the reasoning, ``</think>`` and the opener."""
        self._thinking_first = False
        out = PromptBuilder()
        out.text("".join(self._stage))
        out.template(THINK_CLOSE)
        suffix = (*out.pieces(), *self._opener)
        self._prompt = self._extended(suffix)
        self._stage = []
        events = self._feed_own(THINK_CLOSE + _text(self._opener))
        body = self._make_body(self._prompt, self._one_call_stop())
        if isinstance(body.get("max_tokens"), int):
            body["max_tokens"] = max(1, body["max_tokens"] - completion_tokens)
        return events, body

    def _feed_own(self, text: str) -> list[Event]:
        if self._one_call:
            self._fed.append(text)
        events = self.parser.feed(text)
        for event in events:
            self._call_seen = self._call_seen or isinstance(event, ToolCallStart)
            self._reasoning_ended = self._reasoning_ended or isinstance(event, ReasoningEnd)
        return events

    def _extended(self, pieces: Sequence[Piece]) -> Prompt:
        """The current prompt followed by ``pieces`` (ids when the prompt is ids)."""
        if isinstance(self._prompt, str) or self._tokenizer is None:
            return str(self._prompt) + _text(pieces)
        encode = self._tokenizer.encode_text
        return self._prompt + [i for text, special in pieces for i in encode(text, special)]

    def _one_call_stop(self) -> list[str]:
        return [self._dialect.invoke_close()] if self._one_call else []

    def _inside_invoke(self) -> bool:
        """The text so far opened an invoke it has not closed (the engine stopped there)."""
        fed = "".join(self._fed)
        opener = f'<{MARKER}{self._dialect.invoke} name="'
        return fed.rfind(opener) > fed.rfind(self._dialect.invoke_close())


def chat_fallback_body(req: ChatRequest, body: dict[str, Any]) -> dict[str, Any] | None:
    """What to send a chat upstream that rejected a forced choice in thinking mode.

    DeepSeek's API (and endpoints like it) answer 400 to ``tool_choice`` ``required`` or a
    named function in thinking mode. The retry asks with ``tool_choice: auto``; for a named
    function only that tool is offered. None when the request forces nothing or does not
    think (then a 400 is the request's own problem).
    """
    if not (req.requires_call and req.render.thinking):
        return None
    retry = {**body, "tool_choice": "auto"}
    name = req.conversation.tool_choice.name
    if name is not None and isinstance(body.get("tools"), list):
        retry["tools"] = [
            tool
            for tool in body["tools"]
            if isinstance(tool, dict) and (tool.get("function") or {}).get("name") == name
        ]
    return retry
