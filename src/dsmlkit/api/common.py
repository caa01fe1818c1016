"""What every API shares: the client API class, the typed request, usage, call ids and
tool_choice checks.

Each API's own module (:mod:`dsmlkit.api.openai`, :mod:`dsmlkit.api.anthropic`,
:mod:`dsmlkit.api.responses`) defines its :class:`ClientApi` subclass, reads a request
body into a :class:`ChatRequest` that carries that API, and builds responses; the helpers
here hold every rule they have in common, so each exists once.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from dsmlkit.api.errors import ApiError, openai_error_body
from dsmlkit.api.seal import Sealer
from dsmlkit.api.sse import json_body
from dsmlkit.conversation.model import Conversation, Tool
from dsmlkit.conversation.server_tools import ServerTool
from dsmlkit.dialects import Dialect
from dsmlkit.encoding import Encoding, OutputReader
from dsmlkit.errors import InvalidRequest
from dsmlkit.fields import Field
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
from dsmlkit.render import RenderCache, RenderOptions, RenderResult

#: Effort names DeepSeek documents; ``none`` means chat mode, the others are mapped by each
#: dialect's effort table (``minimal`` → low, ``ultra`` → max, …).
EFFORT_NAMES = ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")

#: ``max_tokens`` when a request gives none (the defaults of DeepSeek's own toolkit):
#: chat mode, thinking mode, and thinking mode at the highest effort.
DEFAULT_MAX_TOKENS_CHAT = 8192
DEFAULT_MAX_TOKENS_THINKING = 65536
DEFAULT_MAX_TOKENS_MAX_EFFORT = 131072
_MAX_EFFORTS = ("max", "ultra")


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

    @property
    def encoding(self) -> Encoding:
        """The dialect's encoding."""
        return Encoding(self.dialect)

    def tool_functions(self) -> list[Mapping[str, Any]] | None:
        """The tools' function objects, as the parser takes them (None: no tools)."""
        return [tool.function for tool in self.tools] or None

    def parser(self, start_in: StartIn, id_factory: Callable[[], str] | None = None) -> Parser:
        """A fresh parser for one output that starts in ``start_in``."""
        return self.encoding.parser(
            start_in, tools=self.tool_functions(), strict=self.strict, id_factory=id_factory
        )


@dataclass(frozen=True)
class ReadContext:
    """What a request reader may use besides the body: the dialect, the ``sealer`` that
    opens sealed Responses reasoning, the caller's ``cache``, ``signatures``, which checks
    Anthropic thinking-block signatures, and the ``history`` items of a stored Responses
    conversation the body continues."""

    dialect: str | Dialect
    sealer: Sealer | None = None
    cache: RenderCache | None = None
    signatures: Sealer | None = None
    history: Sequence[Any] = ()


@dataclass(frozen=True)
class Answer:
    """What an answer carries besides the parsed message: its id and creation time, the
    usage (for a stream: what is known at its start), the matched stop string, how
    Anthropic thinking blocks are signed and what seals Responses reasoning."""

    id: str
    created: int
    usage: Usage | None = None
    stop_sequence: str | None = None
    sign_thinking: Callable[[str], str] | None = None
    sealer: Sealer | None = None


class StreamWriter(Protocol):
    """The SSE text of one streamed answer, from start to finish: each API's stream class
    (:class:`~dsmlkit.api.openai.OpenAIStream`, :class:`~dsmlkit.api.anthropic.AnthropicStream`,
    :class:`~dsmlkit.api.responses.ResponsesStream`)."""

    def start_sse(self) -> list[str]: ...
    def feed_sse(self, events: Sequence[Event]) -> list[str]: ...
    def finish_sse(
        self, usage: Usage | None = None, stop_sequence: str | None = None
    ) -> list[str]: ...
    def error_sse(self, err: ApiError, request_id: str) -> list[str]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...
    @property
    def response(self) -> dict[str, Any] | None:
        """The finished Responses ``response`` object (other APIs: None)."""
        ...


class PrefixedIds:
    """Fresh ids: ``prefix`` and what ``token`` makes (default 24 random hex digits)."""

    def __init__(self, prefix: str, token: Callable[[], str] | None = None) -> None:
        self._prefix = prefix
        self._token = token

    def __call__(self) -> str:
        return self._prefix + (self._token() if self._token else secrets.token_hex(12))


#: The typed request an API reads its bodies into.
R = TypeVar("R", bound="ChatRequest")


class ClientApi(ABC, Generic[R]):
    """One client API, from the body to the bytes: its route, its request reader, its
    response builder, its stream writer and its error envelope.

    Each API defines its subclass and its one instance in its own module (``CHAT``,
    ``MESSAGES``, ``RESPONSES``); :data:`dsmlkit.api.request.APIS` lists them, and the
    server's routes and the CLI's choices are read from there.

    ``name``: the API's name (``chat``, ``messages``, ``responses``); ``aliases``: the
    older names also accepted (``openai``, ``anthropic``). ``path``: the gateway route.
    ``keeps_responses``: a finished answer is a response object the server may store
    (Responses' ``store`` / ``previous_response_id``). ``beta_header``: the request header
    naming beta features the API accepts. ``usage_at_start``: a streamed answer reports the
    prompt's tokens before any output (Messages' ``message_start``).
    """

    name: str
    aliases: tuple[str, ...] = ()
    path: str
    response_id_prefix: str
    call_id_prefix: str
    keeps_responses = False
    beta_header: str | None = None
    usage_at_start = False

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the API is known by: its name, then its aliases."""
        return (self.name, *self.aliases)

    @property
    def render_path(self) -> str:
        """The route that renders this API's request instead of sending it."""
        return self.path + "/render"

    @abstractmethod
    def read(self, body: Any, context: ReadContext) -> R:
        """The typed request of ``body``; raises ``InvalidRequest`` naming the field."""

    @abstractmethod
    def read_tools(self, tools: Any) -> tuple[Tool, ...]:
        """A ``tools`` list in this API's form, read and checked as the request reader does."""

    @abstractmethod
    def respond(
        self, msg: ParsedMessage, model: str, answer: Answer, req: R | None
    ) -> dict[str, Any]:
        """The whole answer to ``req`` (None: an answer to no request, ``/v1/parse``)."""

    def respond_json(self, msg: ParsedMessage, model: str, answer: Answer, req: R | None) -> bytes:
        """:meth:`respond` as the bytes of a JSON body."""
        return json_body(self.respond(msg, model, answer, req))

    @abstractmethod
    def open_stream(self, req: R, answer: Answer) -> StreamWriter:
        """The stream writer of one streamed answer to ``req``."""

    def error_body(
        self, err: ApiError | InvalidRequest, request_id: str | None = None
    ) -> dict[str, Any]:
        """``err`` in this API's error envelope (with the server's ``request_id`` where the
        API carries one); OpenAI's envelope unless the API has its own."""
        return openai_error_body(err)

    def new_response_id(self) -> str:
        """A fresh answer id: this API's prefix and 24 random hex digits."""
        return self.response_id_prefix + secrets.token_hex(12)

    def call_ids(self, token: Callable[[], str] | None = None) -> Callable[[], str]:
        """Fresh tool-call ids with this API's prefix (``token``: the part after it;
        default 24 random hex digits)."""
        return PrefixedIds(self.call_id_prefix, token)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


@dataclass(frozen=True)
class ChatRequest:
    """One validated API request, whichever API it came in.

    ``conversation`` and ``render`` are all :func:`~dsmlkit.render.render_conversation`
    needs; ``parse`` makes the parser for the answer. ``sampling`` holds the engine's
    sampling fields in OpenAI names (``max_tokens``, ``temperature``, ``stop`` …).
    ``omit_reasoning``: the answer shows no reasoning text (Anthropic ``thinking.display:
    "omitted"``: thinking blocks come with an empty text and their signature).
    ``server_tools``: the ``tools`` entries of tools a hosted endpoint runs itself, as sent
    (:mod:`dsmlkit.conversation.server_tools`); the upstream kind sends them on or refuses them.
    """

    api: ClientApi[Any]
    model: str
    conversation: Conversation
    render: RenderOptions
    parse: ParseOptions
    parallel_tool_calls: bool
    stream: bool
    include_usage: bool
    max_tokens: int | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    omit_reasoning: bool = False
    server_tools: tuple[ServerTool, ...] = ()

    def resolved_max_tokens(
        self,
        prompt_tokens: int | None = None,
        max_model_len: int | None = None,
        *,
        clamp: bool = False,
    ) -> int:
        """The one output budget to send upstream: the client's ``max_tokens``, else the
        default for the mode (8192 chat, 65536 thinking, 131072 thinking at max effort),
        capped by what the context leaves after the prompt when ``max_model_len`` is known.

        Raises :class:`InvalidRequest` when the prompt does not fit, and when the requested
        budget does not (unless ``clamp``: then it is lowered to what the context leaves).
        """
        return _resolve_max_tokens(
            self.max_tokens,
            thinking=self.render.thinking,
            effort=self.render.reasoning_effort,
            prompt_tokens=prompt_tokens,
            max_model_len=max_model_len,
            clamp=clamp,
        )

    @property
    def requires_call(self) -> bool:
        """``tool_choice`` is ``required`` or names a function, and there are tools."""
        return bool(self.conversation.tools) and self.conversation.tool_choice.mode == "required"

    @property
    def one_call_only(self) -> bool:
        """``parallel_tool_calls`` is false on a request that may call tools."""
        conversation = self.conversation
        may_call = bool(conversation.tools) and conversation.tool_choice.mode != "none"
        return may_call and not self.parallel_tool_calls

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The client's stop strings."""
        return tuple(self.sampling.get("stop", ()))

    @property
    def encoding(self) -> Encoding:
        """The encoding of this request's dialect (its prompt writer and output reader)."""
        return self.parse.encoding

    def new_parser(self, start_in: StartIn, id_factory: Callable[[], str] | None = None) -> Parser:
        """A parser for this request's output; call ids default to this API's prefix."""
        return self.parse.parser(start_in, id_factory or self.api.call_ids())

    def output_parser(
        self, result: RenderResult, id_factory: Callable[[], str] | None = None
    ) -> OutputReader:
        """A reader of the engine's continuation of ``result``'s prompt
        (:meth:`Encoding.output_reader` with this request's tools; call ids default to this
        API's prefix)."""
        parse = self.parse
        return parse.encoding.output_reader(
            result,
            tools=parse.tool_functions(),
            strict=parse.strict,
            id_factory=id_factory or self.api.call_ids(),
        )

    def options(self) -> dict[str, Any]:
        """The request options in OpenAI chat-completion names (only those that apply)."""
        options: dict[str, Any] = {}
        if self.conversation.tools:
            options["tool_choice"] = self.conversation.tool_choice.to_chat()
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
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
        options.update(self.sampling)
        if self.render.continue_final_message:
            options["continue_final_message"] = True
        if not self.render.add_generation_prompt:
            options["add_generation_prompt"] = False
        return options


def _resolve_max_tokens(
    requested: int | None,
    *,
    thinking: bool,
    effort: str | int | None,
    prompt_tokens: int | None = None,
    max_model_len: int | None = None,
    clamp: bool = False,
) -> int:
    """One ``max_tokens`` per request (see :meth:`ChatRequest.resolved_max_tokens`)."""
    if requested is None:
        if not thinking:
            wanted = DEFAULT_MAX_TOKENS_CHAT
        elif effort in _MAX_EFFORTS:
            wanted = DEFAULT_MAX_TOKENS_MAX_EFFORT
        else:
            wanted = DEFAULT_MAX_TOKENS_THINKING
    else:
        wanted = requested
    if max_model_len is None:
        return wanted
    left = max_model_len - (prompt_tokens or 0)
    if requested is not None and requested > left and not (clamp and left >= 1):
        # rejected; clamped (below) only when the prompt leaves room for some output
        raise InvalidRequest(
            f"max_tokens {requested} does not fit: the prompt has {prompt_tokens or 0} tokens "
            f"and the model's context holds {max_model_len}; ask for at most {max(left, 0)}",
            "max_tokens",
        )
    if left < 1:
        raise InvalidRequest(
            f"the prompt has {prompt_tokens} tokens, more than the model's context of "
            f"{max_model_len} holds; shorten the conversation",
            "messages",
        )
    return min(wanted, left)


def read_effort(field: Field) -> str | int | None:
    """A reasoning effort: one of :data:`EFFORT_NAMES` or an integer budget 1-100."""
    if not field.present:
        return None
    if isinstance(field.value, int) and not isinstance(field.value, bool):
        effort = field.integer(minimum=1)
        if effort > 100:
            raise field.error("an integer effort must be 1-100")
        return effort
    return field.choice(EFFORT_NAMES)


def read_switch(field: Field, *, adaptive: bool = False) -> bool | None:
    """``{"type": "enabled" | "disabled"}`` (Anthropic also ``adaptive``); None when absent."""
    if not field.present:
        return None
    allowed = ("enabled", "disabled", "adaptive") if adaptive else ("enabled", "disabled")
    return field["type"].choice(allowed) != "disabled"


def resolve_thinking(
    switches: Sequence[tuple[bool | None, str]],
    effort: str | int | None,
    effort_param: str,
    *,
    default: bool,
    dialect: Dialect,
    notes: list[str],
) -> tuple[bool, str | int | None]:
    """Thinking mode and the effort for the renderer, by one precedence for every API.

    1. The first thinking switch the request gives wins (``switches`` in order, e.g.
       DeepSeek's ``thinking.type``, then ``chat_template_kwargs.thinking``).
    2. Otherwise effort ``none`` means chat mode.
    3. Otherwise the API's ``default``.

    An effort ``none`` under a switch that turns thinking on means the default effort; an
    effort in chat mode changes nothing; a dialect without effort levels (V3.2) sets the
    effort aside (API clients send one on every request). Each of these is noted.
    """
    switch = next(((value, param) for value, param in switches if value is not None), None)
    if switch is not None:
        thinking = switch[0]
    elif effort == "none":
        thinking = False
    else:
        thinking = default
    if effort == "none":
        if thinking and switch is not None:
            notes.append(f"{effort_param}: 'none' is overridden by {switch[1]}; default effort")
        return thinking, None
    if effort is not None and not thinking:
        notes.append(f"{effort_param}: {effort!r} changes nothing in chat mode")
    if effort is not None and not dialect.effort_tables:
        notes.append(f"{effort_param}: {dialect.name} has no reasoning effort; {effort!r} ignored")
        return thinking, None
    return thinking, effort


def note_ignored(root: Field, names: Sequence[str], notes: list[str]) -> None:
    """Note the request fields among ``names`` that are accepted but change nothing."""
    for name in names:
        if root[name].present:
            notes.append(f"{name}: accepted; changes nothing in the prompt")


# --- tool_choice on the model's output ---------------------------------------------------


def check_tool_choice(req: ChatRequest, calls: Sequence[ToolCall]) -> tuple[Diagnostic, ...]:
    """Report how ``calls`` break the request's tool_choice / parallel_tool_calls.

    Calls are never dropped or changed: the caller logs these (or turns them into errors).
    """
    found: list[Diagnostic] = []
    choice = req.conversation.tool_choice
    if choice.mode == "none" and calls:
        found.append(
            Diagnostic(
                "tool_choice_none_violated", "tool_choice is none but the model called tools"
            )
        )
    if choice.mode == "required" and not calls:
        found.append(
            Diagnostic(
                "tool_call_required_missing", "tool_choice requires a call; the model made none"
            )
        )
    if choice.name is not None:
        wanted = choice.name
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
    if len(events) == 1:  # the usual batch of one streamed delta
        event = events[0]
        return [] if isinstance(event, _TEXT_EVENTS) and not event.text else [event]
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


def read_stop(stop: Field) -> list[str]:
    """Stop strings: one string or an array of strings."""
    if isinstance(stop.value, str):
        return [stop.value]
    return [item.string() for item in stop.array()]
