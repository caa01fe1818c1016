"""What both APIs share: the converted request, usage, call ids and tool_choice checks.

The per-API modules (:mod:`dsmlkit.api.openai`, :mod:`dsmlkit.api.anthropic`) read a
request body into a :class:`ChatRequest` and build responses; the helpers here hold every
rule the two have in common, so each exists once.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dsmlkit.api.errors import ApiError
from dsmlkit.api.fields import Field
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
from dsmlkit.render import EFFORT_TABLES

Api = Literal["openai", "anthropic"]

#: Effort names both APIs accept; the renderer maps them onto each dialect's effort table.
EFFORT_NAMES = ("low", "medium", "high", "xhigh", "max")

#: Characters a tool name may hold (it is written into ``name="…"`` in DSML).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True)
class Usage:
    """Token counts of one completion; ``cached_tokens``: prompt tokens served from cache."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class ChatRequest:
    """A validated API request: canonical conversation plus render, parse and sampling options."""

    api: Api
    model: str
    dialect: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    thinking: bool
    reasoning_effort: str | int | None
    response_format: dict[str, Any] | None
    add_generation_prompt: bool
    continue_final_message: bool
    stream: bool
    include_usage: bool
    sampling: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def render_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``render(messages, tools, **render_kwargs)``."""
        return {
            "dialect": self.dialect,
            "mode": "thinking" if self.thinking else "chat",
            "reasoning_effort": self.reasoning_effort,
            "response_format": self.response_format,
            "add_generation_prompt": self.add_generation_prompt,
            "continue_final_message": self.continue_final_message,
        }

    @property
    def parser_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Parser(start_in=…, **parser_kwargs)``."""
        return {"dialect": self.dialect, "tools": self.tools or None}

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The client's stop strings."""
        return tuple(self.sampling.get("stop", ()))

    def new_parser(self, start_in: StartIn, id_factory: Callable[[], str] | None = None) -> Parser:
        """A parser for this request's output; call ids default to this API's prefix."""
        return Parser(
            start_in=start_in,
            id_factory=id_factory or call_id_factory(self.api),
            **self.parser_kwargs,
        )

    def options(self) -> dict[str, Any]:
        """The request options in OpenAI chat-completion names (only those that apply)."""
        options: dict[str, Any] = {}
        if self.tools:
            options["tool_choice"] = self.tool_choice
        if not self.parallel_tool_calls:
            options["parallel_tool_calls"] = False
        options["thinking"] = self.thinking
        if self.reasoning_effort is not None:
            options["reasoning_effort"] = self.reasoning_effort
        if self.response_format is not None:
            options["response_format"] = self.response_format
        options["stream"] = self.stream
        if self.stream and self.include_usage:
            options["stream_options"] = {"include_usage": True}
        options.update(self.sampling)
        if self.continue_final_message:
            options["continue_final_message"] = True
        if not self.add_generation_prompt:
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
        raise ApiError.invalid_request("the request body must be a JSON object")
    return Field(body, "")


def read_numbers(root: Field, names: Sequence[str]) -> dict[str, float | int]:
    """The numeric sampling fields among ``names`` that the request gives."""
    return {name: root[name].number() for name in names if root[name].present}


def effort_for_dialect(
    effort: str | int | None, dialect: str, param: str, notes: list[str]
) -> str | int | None:
    """The requested effort, or ``None`` (with a note) on a dialect without effort levels.

    API clients send an effort on every request (Claude Code does); a V3.2 model has no
    effort levels, so the hint is set aside rather than failing the request.
    """
    if effort is not None and not EFFORT_TABLES[dialect]:
        notes.append(f"{param}: {dialect} has no reasoning effort; {effort!r} ignored")
        return None
    return effort


def read_stop(stop: Field) -> list[str]:
    """Stop strings: one string or an array of strings."""
    if isinstance(stop.value, str):
        return [stop.value]
    return [item.string() for item in stop.array()]


def function_tool(
    name: Field,
    description: Field,
    parameters: Field,
    strict: Field,
    defer_loading: bool,
) -> dict[str, Any]:
    """A canonical tool: ``{"type": "function", "function": {...}}`` plus ``defer_loading``."""
    function: dict[str, Any] = {"name": tool_name(name)}
    if description.present:
        function["description"] = description.string()
    if parameters.present:
        function["parameters"] = dict(parameters.object())
    if strict.present:
        function["strict"] = strict.boolean()
    tool: dict[str, Any] = {"type": "function", "function": function}
    if defer_loading:
        tool["defer_loading"] = True
    return tool


def tool_name(name: Field) -> str:
    """A tool name fit for DSML's ``name="…"`` attribute."""
    value = name.nonempty_string()
    if not TOOL_NAME.fullmatch(value):
        raise name.error(f"tool name {value!r} must be 1-128 characters from A-Z a-z 0-9 _ . : -")
    return value


def add_tool(tools: list[dict[str, Any]], tool: dict[str, Any], at: Field) -> None:
    """Append ``tool`` unless a tool of that name is already there (calls would be ambiguous)."""
    name = tool["function"]["name"]
    if any(known["function"]["name"] == name for known in tools):
        raise at.error(f"two tools are named {name!r}")
    tools.append(tool)


def named_choice(name: Field, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"type": "function", "function": {"name": …}}`` for a name that is a request tool."""
    value = name.nonempty_string()
    if value not in {tool["function"]["name"] for tool in tools}:
        raise name.error(f"names the tool {value!r}, which is not in tools")
    return {"type": "function", "function": {"name": value}}


def check_choice_has_tools(choice: str | dict[str, Any], tools: list[Any], at: Field) -> None:
    """A choice that demands a call needs tools to call."""
    if choice not in ("auto", "none") and not tools:
        raise at.error("requires a call but the request has no tools")


def tool_reference_part(part: Field) -> dict[str, Any]:
    """``{"type": "tool_reference", "name": …}`` from either spelling (``name``/``tool_name``)."""
    name = part["tool_name"] if part["tool_name"].present else part["name"]
    return {"type": "tool_reference", "name": name.nonempty_string()}


def collapse_text(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part becomes its string; anything else stays a list of parts."""
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def arguments_text(arguments: Field) -> str:
    """Tool-call arguments checked to be a JSON object, as JSON text."""
    if isinstance(arguments.value, dict):
        return json.dumps(arguments.value, ensure_ascii=False)
    text = arguments.string()
    try:
        decoded = json.loads(text)
        if isinstance(decoded, str):  # double-encoded by some clients
            text, decoded = decoded, json.loads(decoded)
    except ValueError as exc:
        raise arguments.error(f"must be JSON text of an object: {exc}") from None
    if not isinstance(decoded, dict):
        raise arguments.error("must be JSON text of an object")
    return text


class ToolAnswers:
    """Which calls of the latest assistant turn still wait for their result."""

    def __init__(self) -> None:
        self._waiting: list[str] = []
        self._answered: set[str] = set()

    def calls_made(self, ids: list[str], at: Field) -> None:
        """An assistant turn made these calls; earlier ones can no longer be answered."""
        if len(set(ids)) != len(ids):
            raise at.error("two tool calls share an id")
        self._waiting = list(ids)
        self._answered = set()

    def answer(self, call_id: str | None, at: Field) -> str:
        """Record a result for ``call_id`` (``None``: the next unanswered call); return the id."""
        if call_id is None:
            if not self._waiting:
                raise at.error(
                    "a tool result without a call id needs an unanswered tool call in the "
                    "assistant turn right before it; give the id of the call it answers"
                )
            call_id = self._waiting[0]
        elif call_id not in self._waiting:
            if call_id in self._answered:
                raise at.error(f"call {call_id!r} already has a result")
            raise at.error(f"answers no tool call of the preceding assistant turn (id {call_id!r})")
        self._waiting.remove(call_id)
        self._answered.add(call_id)
        return call_id
