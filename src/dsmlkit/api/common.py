"""What every API shares: the typed request, usage, call ids and tool_choice checks.

The per-API modules (:mod:`dsmlkit.api.openai`, :mod:`dsmlkit.api.anthropic`) read a
request body into a :class:`ChatRequest` and build responses; the helpers here hold every
rule the two have in common, so each exists once.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dsmlkit.api.fields import Field
from dsmlkit.dialects import Dialect
from dsmlkit.errors import InvalidRequest
from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    ParsedMessage,
    Parser,
    ReasoningDelta,
    StartIn,
    ToolCall,
)
from dsmlkit.render import RenderOptions
from dsmlkit.render.conversation import Conversation, Tool

Api = Literal["openai", "anthropic"]

#: Effort names both APIs accept; the renderer maps them onto each dialect's effort table.
EFFORT_NAMES = ("low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class Usage:
    """Token counts of one completion; ``cached_tokens``: prompt tokens served from cache."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class ParseOptions:
    """How to read the model's output: the dialect, the request's tools, strictness."""

    dialect: Dialect
    tools: tuple[Tool, ...] = ()
    strict: bool = False

    def parser(self, start_in: StartIn, id_factory: Callable[[], str] | None = None) -> Parser:
        """A fresh parser for one output that starts in ``start_in``."""
        return Parser(
            self.dialect,
            start_in=start_in,
            strict=self.strict,
            tools=[tool.function for tool in self.tools] or None,
            id_factory=id_factory,
        )


@dataclass(frozen=True)
class ChatRequest:
    """One validated API request, whichever API it came in.

    ``conversation`` and ``render`` are all :func:`~dsmlkit.render.render_conversation`
    needs; ``parse`` makes the parser for the answer. ``sampling`` holds the engine's
    sampling fields in OpenAI names (``max_tokens``, ``temperature``, ``stop`` …).
    """

    api: Api
    model: str
    conversation: Conversation
    render: RenderOptions
    parse: ParseOptions
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    stream: bool
    include_usage: bool
    sampling: Mapping[str, Any] = field(default_factory=dict)

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The client's stop strings."""
        return tuple(self.sampling.get("stop", ()))

    def new_parser(self, start_in: StartIn, id_factory: Callable[[], str] | None = None) -> Parser:
        """A parser for this request's output; call ids default to this API's prefix."""
        return self.parse.parser(start_in, id_factory or call_id_factory(self.api))

    def options(self) -> dict[str, Any]:
        """The request options in OpenAI chat-completion names (only those that apply)."""
        options: dict[str, Any] = {}
        if self.conversation.tools:
            options["tool_choice"] = self.tool_choice
        if not self.parallel_tool_calls:
            options["parallel_tool_calls"] = False
        options["thinking"] = self.render.thinking
        if self.render.reasoning_effort is not None:
            options["reasoning_effort"] = self.render.reasoning_effort
        if self.conversation.response_format is not None:
            options["response_format"] = dict(self.conversation.response_format)
        options["stream"] = self.stream
        if self.stream and self.include_usage:
            options["stream_options"] = {"include_usage": True}
        options.update(self.sampling)
        if self.render.continue_final_message:
            options["continue_final_message"] = True
        if not self.render.add_generation_prompt:
            options["add_generation_prompt"] = False
        return options


def call_id_factory(api: Api, token: Callable[[], str] | None = None) -> Callable[[], str]:
    """Fresh tool-call ids: ``call_…`` (OpenAI) or ``toolu_…`` (Anthropic).

    ``token`` makes the part after the prefix (default: 24 random hex digits).
    """
    prefix = "toolu_" if api == "anthropic" else "call_"
    make_token = token or (lambda: secrets.token_hex(12))
    return lambda: prefix + make_token()


# --- tool_choice on the model's output ---------------------------------------------------


def check_tool_choice(req: ChatRequest, calls: Sequence[ToolCall]) -> tuple[Diagnostic, ...]:
    """Report how ``calls`` break the request's tool_choice / parallel_tool_calls.

    Calls are never dropped or changed: the caller logs these (or turns them into errors).
    """
    found: list[Diagnostic] = []
    choice = req.tool_choice
    if choice == "none" and calls:
        found.append(
            Diagnostic(
                "tool_choice_none_violated", "tool_choice is none but the model called tools"
            )
        )
    if choice != "none" and choice != "auto" and not calls:
        found.append(
            Diagnostic(
                "tool_call_required_missing", "tool_choice requires a call; the model made none"
            )
        )
    if isinstance(choice, dict):
        wanted = choice["function"]["name"]
        others = sorted({call.name for call in calls if call.name != wanted})
        if others:
            found.append(
                Diagnostic(
                    "tool_choice_name_mismatch",
                    f"tool_choice names {wanted!r} but the model called {', '.join(others)}",
                )
            )
    if not req.parallel_tool_calls and len(calls) > 1:
        found.append(
            Diagnostic(
                "parallel_tool_calls_violated",
                f"parallel_tool_calls is false but the model made {len(calls)} calls",
            )
        )
    return tuple(found)


def response_diagnostics(msg: ParsedMessage, req: ChatRequest) -> tuple[Diagnostic, ...]:
    """Everything worth logging about one response: the parser's findings, then tool_choice's."""
    return msg.diagnostics + check_tool_choice(req, msg.calls)


_TextEvent = ContentDelta | ReasoningDelta | ArgumentsDelta
_TEXT_EVENTS = (ContentDelta, ReasoningDelta, ArgumentsDelta)


def _same_run(last: _TextEvent, event: _TextEvent) -> bool:
    if isinstance(event, ArgumentsDelta):
        return isinstance(last, ArgumentsDelta) and last.index == event.index
    return type(last) is type(event)


def _with_text(event: _TextEvent, text: str) -> _TextEvent:
    if isinstance(event, ArgumentsDelta):
        return ArgumentsDelta(event.index, text)
    return ContentDelta(text) if isinstance(event, ContentDelta) else ReasoningDelta(text)


def coalesce(events: Sequence[Event]) -> list[Event]:
    """Merge neighbouring text deltas of one kind (and argument fragments of one call).

    Fewer, larger stream chunks; the concatenated text is unchanged. Empty deltas go.
    Each run is joined once, so the cost is linear in the text.
    """
    merged: list[Event] = []
    run: list[str] = []  # the texts merged[-1] stands for, while it is a text event

    def end_run() -> None:
        last = merged[-1] if merged else None
        if len(run) > 1 and isinstance(last, _TEXT_EVENTS):
            merged[-1] = _with_text(last, "".join(run))
        run.clear()

    for event in events:
        if isinstance(event, _TEXT_EVENTS):
            if not event.text:
                continue
            last = merged[-1] if merged else None
            if run and isinstance(last, _TEXT_EVENTS) and _same_run(last, event):
                run.append(event.text)
                continue
        end_run()
        merged.append(event)
        if isinstance(event, _TEXT_EVENTS):
            run.append(event.text)
    end_run()
    return merged


# --- conversion helpers shared by both request readers ------------------------------------


def request_root(body: Any) -> Field:
    """The request body as a :class:`Field`; it must be a JSON object."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return Field(body, "")


def read_numbers(root: Field, names: Sequence[str]) -> dict[str, float | int]:
    """The numeric sampling fields among ``names`` that the request gives."""
    return {name: root[name].number() for name in names if root[name].present}


def effort_for_dialect(
    effort: str | int | None, dialect: Dialect, param: str, notes: list[str]
) -> str | int | None:
    """The requested effort, or ``None`` (with a note) on a dialect without effort levels.

    API clients send an effort on every request (Claude Code does); a V3.2 model has no
    effort levels, so the hint is set aside rather than failing the request.
    """
    if effort is not None and not dialect.effort_tables:
        notes.append(f"{param}: {dialect.name} has no reasoning effort; {effort!r} ignored")
        return None
    return effort


def read_stop(stop: Field) -> list[str]:
    """Stop strings: one string or an array of strings."""
    if isinstance(stop.value, str):
        return [stop.value]
    return [item.string() for item in stop.array()]


def named_choice(name: Field, tools: Sequence[Tool]) -> dict[str, Any]:
    """``{"type": "function", "function": {"name": …}}`` for a name that is a request tool."""
    value = name.nonempty_string()
    if value not in {tool.name for tool in tools}:
        raise name.error(f"names the tool {value!r}, which is not in tools")
    return {"type": "function", "function": {"name": value}}


def check_choice_has_tools(choice: str | dict[str, Any], tools: Sequence[Tool], at: Field) -> None:
    """A choice that demands a call needs tools to call."""
    if choice not in ("auto", "none") and not tools:
        raise at.error("requires a call but the request has no tools")
