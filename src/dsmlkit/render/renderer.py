"""Render a conversation into the exact prompt DeepSeek's reference encoders produce.

Two families share the helpers here:

* **V3.2**: every user turn carries its own ``<｜Assistant｜>`` header; tool results follow
  the assistant turn as ``<function_results>`` and are matched to calls by position.
* **V4 / V4.1**: tool messages become ``<tool_result>`` blocks of a user turn (sorted into
  call order), consecutive user turns merge, a header follows a user turn only when an
  assistant turn (or the end) comes next, and tools anywhere keep all reasoning in
  history. V4.1 adds ``<｜System｜>``, numeric effort budgets and spaced DSML tags.

``docs/rendering.md`` describes the behaviour and the options; the golden prompts in
``tests/data/golden/`` pin it byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from dsmlkit.conversation.model import (
    Conversation,
    HistoryCall,
    ImagePart,
    Message,
    Part,
    TextPart,
    Tool,
    ToolReferencePart,
    to_json,
)
from dsmlkit.conversation.readers import build_conversation
from dsmlkit.dialects import (
    BOS,
    DEFAULT_DIALECT,
    DIALECTS,
    EOS,
    MARKER,
    TASK_TOKENS,
    THINK_CLOSE,
    THINK_OPEN,
    Dialect,
)
from dsmlkit.dialects import get_dialect as _lookup_dialect
from dsmlkit.errors import CallerError, InvalidRequest
from dsmlkit.parse import StartIn, parse
from dsmlkit.render.builder import Piece, PromptBuilder
from dsmlkit.render.cache import RenderCache
from dsmlkit.render.templates import (
    ASSISTANT,
    IMAGE,
    LATEST_REMINDER,
    RESPONSE_FORMAT,
    SYSTEM,
    USER,
)

MODES = ("thinking", "chat")
TOOL_REFERENCE_MODES = ("name", "schema")
_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class RenderResult:
    """A rendered prompt and what the parser needs to read the model's answer.

    ``pieces`` concatenate to ``prompt``; a piece flagged True is a special token the
    template placed (BOS, role tokens, ``<think>``, the ``｜DSML｜`` marker of markup the
    template wrote, …), False is any other text, above all everything that came from the
    caller. ``output_starts_in`` says whether the model's output begins inside reasoning
    (the prompt ends with ``<think>``) or in content. ``output_prefix`` is the end of the
    prompt that belongs to the answer when a final message is continued (prefill, chat
    prefix completion): the text a parser reads first, starting in ``output_starts_in``,
    to be where the model is. ``notes`` reports things that were rendered in a way worth
    knowing about.
    """

    prompt: str
    output_starts_in: StartIn
    stop: tuple[str, ...]
    notes: tuple[str, ...]
    dialect: str
    output_prefix: str = ""
    _written: PromptBuilder = field(default_factory=PromptBuilder, repr=False, compare=False)

    @cached_property
    def pieces(self) -> tuple[Piece, ...]:
        """The prompt as ``(text, is_special)`` pieces (made when first asked for)."""
        return self._written.pieces()


@dataclass(frozen=True)
class _Options:
    dialect: Dialect
    thinking: bool
    effort_prefix: str
    drop_thinking: bool
    add_generation_prompt: bool
    continue_final_message: bool
    tools_section: str
    schema_references: bool


@dataclass
class _UserTurn:
    """A V4-family user turn: text/image parts and tool messages, merged in order."""

    blocks: list[Part | Message] = field(default_factory=list)
    task: str | None = None


@dataclass(frozen=True)
class _ReadBack:
    """A call block to parse back: ``prompt[start:end]``."""

    message: Message
    start: int
    end: int


_TurnT = TypeVar("_TurnT", _UserTurn | Message, Message)
_ItemT = TypeVar("_ItemT")


@dataclass(frozen=True)
class RenderOptions:
    """How to render a conversation; checked when made (bad values raise InvalidRequest).

    ``thinking`` picks thinking or chat mode. ``reasoning_effort`` is a level name the
    dialect's effort table knows or, where the table has budgets, an integer; ``effort_table``
    picks the checkpoint's table (None: the dialect's first). ``drop_thinking=None`` keeps
    the reference default (drop reasoning before the last user turn; V4/V4.1 never drop
    when tools are present). ``tool_reference="schema"`` hides ``defer_loading`` tools from
    the tools section and shows a referenced tool's definition in its tool result.
    ``template_variant`` picks a tools-section text (V3.2: ``official`` or ``compact``).
    ``continue_final_message`` ends the prompt inside the final assistant message.
    """

    dialect: Dialect = DEFAULT_DIALECT
    thinking: bool = True
    reasoning_effort: str | int | None = None
    effort_table: str | None = None
    drop_thinking: bool | None = None
    add_bos: bool = True
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tool_reference: str = "name"
    template_variant: str | None = None

    def __post_init__(self) -> None:
        if self.tool_reference not in TOOL_REFERENCE_MODES:
            raise InvalidRequest(
                f"unknown tool_reference mode {self.tool_reference!r}; use name or schema",
                "tool_reference",
            )
        self.effort_prefix()
        self.tools_section()

    @property
    def mode(self) -> str:
        """``thinking`` or ``chat``."""
        return "thinking" if self.thinking else "chat"

    def effort_prefix(self) -> str:
        """What thinking mode puts before the first message for this effort ("" in chat)."""
        table = self.dialect.effort_table(self.effort_table)
        if table is None:
            if self.reasoning_effort is not None:
                raise InvalidRequest(
                    f"{self.dialect.name} has no reasoning effort", "reasoning_effort"
                )
            return ""
        prefix = table.prefix(self.reasoning_effort)
        return prefix if self.thinking else ""

    def tools_section(self) -> str:
        """The tools-section text of the chosen template variant."""
        return self.dialect.tools_section(self.template_variant)


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    dialect: str | Dialect = DEFAULT_DIALECT,
    mode: str = "thinking",
    reasoning_effort: str | int | None = None,
    effort_table: str | None = None,
    drop_thinking: bool | None = None,
    add_bos: bool = True,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    tool_reference: str = "name",
    response_format: Mapping[str, Any] | None = None,
    template_variant: str | None = None,
    cache: RenderCache | None = None,
) -> RenderResult:
    """Render OpenAI-style ``messages`` (and request ``tools``) into a DeepSeek prompt.

    A convenience over :func:`build_conversation`, :class:`RenderOptions` and
    :func:`render_conversation`; ``mode`` is ``"thinking"`` or ``"chat"``, the other
    options are :class:`RenderOptions`'; ``cache`` keeps what may be reused by a later
    request (none: nothing is kept). Raises :class:`~dsmlkit.errors.InvalidRequest`
    for any caller mistake.
    """
    options = RenderOptions(
        dialect=resolve_dialect(dialect),
        thinking=thinking_of(mode),
        reasoning_effort=reasoning_effort,
        effort_table=effort_table,
        drop_thinking=drop_thinking,
        add_bos=add_bos,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        tool_reference=tool_reference,
        template_variant=template_variant,
    )
    conversation = build_conversation(messages, tools, response_format, cache)
    return render_conversation(conversation, options, cache)


def render_conversation(
    conversation: Conversation, options: RenderOptions, cache: RenderCache | None = None
) -> RenderResult:
    """Render a checked conversation with ``options`` into the exact DeepSeek prompt;
    ``cache`` keeps the calls blocks written, for a later request (none: nothing kept)."""
    resolved = options.dialect
    messages = list(conversation.messages)
    continuing = options.continue_final_message or conversation.prefix is not None
    if continuing and messages[-1].role != "assistant":
        raise InvalidRequest(
            "continue_final_message needs a final assistant message to continue", "messages"
        )
    _check_dialect_support(messages, resolved)
    if conversation.tools or conversation.response_format is not None:
        messages = _attach_to_system(messages, conversation.tools, conversation.response_format)
    notes = list(conversation.notes)

    has_tools = any(message.tools for message in messages)
    drop = True if options.drop_thinking is None else options.drop_thinking
    if drop and has_tools and resolved.layout == "v4":
        drop = False
        if options.drop_thinking:
            notes.append(
                "drop_thinking is off: V4 and V4.1 keep all reasoning when tools are present"
            )
    settings = _Options(
        dialect=resolved,
        thinking=options.thinking,
        effort_prefix=options.effort_prefix(),
        drop_thinking=drop,
        add_generation_prompt=options.add_generation_prompt and not continuing,
        continue_final_message=continuing,
        tools_section=options.tools_section(),
        schema_references=options.tool_reference == "schema",
    )
    writer = _Writer(settings, messages, notes, cache)
    if options.add_bos:
        writer.out.template(BOS)
    if resolved.layout == "v3.2":
        writer.render_v32(messages)
    else:
        writer.render_v4(messages)
    prompt = writer.out.prompt()
    writer.check_read_backs(prompt)
    return RenderResult(
        prompt=prompt,
        output_starts_in=writer.starts_in,
        stop=(EOS,),
        notes=tuple(notes),
        dialect=resolved.name,
        output_prefix=prompt[writer.prefix_start :] if writer.prefix_start >= 0 else "",
        _written=writer.out,
    )


def _attach_to_system(
    messages: list[Message], tools: tuple[Tool, ...], response_format: Mapping[str, Any] | None
) -> list[Message]:
    """Request tools and response format go on the leading system message (one is added)."""
    first = messages[0]
    if first.role != "system":
        return [Message("tools", "system", tools=tools, response_format=response_format), *messages]
    merged = replace(
        first, tools=first.tools + tools, response_format=first.response_format or response_format
    )
    return [merged, *messages[1:]]


def thinking_of(mode: str) -> bool:
    """Whether ``mode`` (``thinking`` or ``chat``) is thinking mode."""
    if mode not in MODES:
        raise InvalidRequest(f"unknown mode {mode!r}; use thinking or chat", "mode")
    return mode == "thinking"


def resolve_dialect(dialect: str | Dialect) -> Dialect:
    """A dialect value from a name (a :class:`Dialect` is returned as is)."""
    try:
        return _lookup_dialect(dialect)
    except CallerError as error:
        raise InvalidRequest(str(error), "dialect") from None


def _check_dialect_support(conversation: Sequence[Message], dialect: Dialect) -> None:
    """The V3.2 layout has no latest_reminder or tasks, and a dialect without ``vision``
    no image placeholder."""
    if dialect.vision is None:
        for message in conversation:
            for part in message.parts:
                if isinstance(part, ImagePart):
                    raise no_image_token(dialect, part)
    if dialect.layout != "v3.2":
        return
    for message in conversation:
        if message.role == "latest_reminder":
            raise InvalidRequest(
                "the latest_reminder role needs the v4 or v4.1 dialect", f"{message.param}.role"
            )
        if message.task is not None:
            raise InvalidRequest("tasks need the v4 or v4.1 dialect", f"{message.param}.task")


def no_image_token(dialect: Dialect, image: ImagePart) -> InvalidRequest:
    """The refusal of an image for a dialect that has no image token."""
    return InvalidRequest(
        f"{dialect.name} has no image token, so its models cannot read images; send this "
        "image to a model served with the v4 or v4.1 dialect (--dialect), or leave it out",
        image.param,
    )


class _Writer:
    """Writes one conversation; holds the options, the output and the notes."""

    def __init__(
        self,
        options: _Options,
        conversation: Sequence[Message],
        notes: list[str],
        cache: RenderCache | None,
    ):
        self.options = options
        self.notes = notes
        self.cache = cache
        self.out = PromptBuilder()
        self.starts_in: StartIn = "content"
        #: Where the continued final message's answer text starts in the prompt (-1: none).
        self.prefix_start = -1
        self.tools_by_name: dict[str, Tool] = {
            tool.name: tool for message in conversation for tool in message.tools
        }
        self._closing_sequence = _closing_sequence_pattern(options.dialect)
        dialect = options.dialect
        tags = (dialect.block, dialect.invoke, dialect.parameter)
        self._markup = _MARKUPS.get(tags) or _markup_of(tags)
        self._read_backs: list[_ReadBack] = []

    # -- V3.2 ---------------------------------------------------------------------------

    def render_v32(self, conversation: Sequence[Message]) -> None:
        options = self.options
        messages = self._drop_reasoning(conversation, _last_user_v32(conversation))
        last_user = _last_user_v32(messages)
        for i, message in enumerate(messages):
            is_last = i == len(messages) - 1
            wants_header = options.add_generation_prompt or not is_last
            opens_reasoning = options.thinking and i == last_user
            if message.role == "system":
                self.out.text(message.text())
                self._system_extras(message)
            elif message.role in ("user", "developer"):
                self.out.template(USER)
                if message.role == "developer":
                    self._system_extras(message)
                    self.out.template("\n\n# The user's message is: ")
                self.out.text(message.text())
                if wants_header:
                    self._header(opens_reasoning)
            elif message.role == "tool":  # always after an assistant turn (checked)
                if messages[i - 1].role != "tool":
                    self.out.template("\n\n<function_results>")
                self.out.template("\n<result>")
                self._tool_result_body(message)
                self.out.template("</result>")
                if is_last or messages[i + 1].role != "tool":
                    self.out.template("\n</function_results>")
                    if wants_header:
                        self.out.template("\n\n")
                        self._think_token(options.thinking and i >= last_user)
            else:
                self._assistant(message, options.thinking and i > last_user, is_last)

    # -- V4 / V4.1 ----------------------------------------------------------------------

    def render_v4(self, conversation: Sequence[Message]) -> None:
        turns = _merge_user_turns(conversation)
        turns = self._drop_reasoning(turns, self._last_user_v4(turns))
        last_user = self._last_user_v4(turns)
        for i, turn in enumerate(turns):
            if i == 0:
                self._v4_effort_prefix(_role_of(turn))
            self._v4_turn(turns, i, last_user)
            is_last = i == len(turns) - 1
            if is_last and not self.options.add_generation_prompt:
                continue
            next_role = None if is_last else _role_of(turns[i + 1])
            if next_role in (None, "assistant", "latest_reminder"):
                self._v4_transition(turn, i, last_user, next_role)

    def _v4_effort_prefix(self, first_role: str) -> None:
        prefix = self.options.effort_prefix
        if self.options.dialect.system_token and (prefix or first_role == "system"):
            self.out.template(SYSTEM)
        self.out.template(prefix)

    def _v4_turn(self, turns: Sequence[_UserTurn | Message], i: int, last_user: int) -> None:
        turn = turns[i]
        if isinstance(turn, _UserTurn):
            self.out.template(USER)
            self._user_blocks(turn.blocks)
        elif turn.role == "system":
            if self.options.dialect.system_token and i > 0:
                self.out.template(SYSTEM)
            self.out.text(turn.text())
            self._system_extras(turn)
        elif turn.role == "developer":
            self.out.template(USER)
            self.out.text(turn.text())
            self._system_extras(turn)
        elif turn.role == "latest_reminder":
            self.out.template(LATEST_REMINDER)
            self.out.text(turn.text())
        else:
            previous = turns[i - 1] if i else None
            answers_task = isinstance(previous, _UserTurn) and previous.task is not None
            with_reasoning = (
                self.options.thinking
                and not answers_task
                and (not self.options.drop_thinking or i > last_user)
            )
            self._assistant(turn, with_reasoning, i == len(turns) - 1)

    def _v4_transition(
        self, turn: _UserTurn | Message, i: int, last_user: int, next_role: str | None
    ) -> None:
        """What follows a turn when an assistant turn, a reminder or the end comes next."""
        thinking = self.options.thinking
        if turn.task == "action":
            self.out.template(ASSISTANT)
            self.out.template(THINK_OPEN if thinking else THINK_CLOSE)
            self.out.template(TASK_TOKENS[turn.task])
            self.starts_in = "content"
        elif turn.task is not None:
            self.out.template(TASK_TOKENS[turn.task])
            self.starts_in = "content"
        elif self._counts_as_user_v4(_role_of(turn), i) or self._v4_system_opens(turn, next_role):
            self._header(thinking and (not self.options.drop_thinking or i >= last_user))

    def _v4_system_opens(self, turn: _UserTurn | Message, next_role: str | None) -> bool:
        """V4 (no ``<｜System｜>``): a system message that ends the prompt or comes before an
        assistant turn opens that turn, as vLLM's V4 encoder does."""
        return (
            not self.options.dialect.system_token
            and _role_of(turn) == "system"
            and next_role in (None, "assistant")
        )

    def _counts_as_user_v4(self, role: str, i: int) -> bool:
        """User turns for headers and dropping; V4.1 counts a later system message too."""
        later_system = self.options.dialect.system_token and role == "system" and i > 0
        return role in ("user", "developer") or later_system

    def _last_user_v4(self, turns: Sequence[_UserTurn | Message]) -> int:
        """The last user turn; on V4.1 a turn of tool results only is not one (its calls'
        turn goes on), as the V4.1 reference has it."""
        results_only_continue = self.options.dialect.system_token
        for i in range(len(turns) - 1, -1, -1):
            turn = turns[i]
            if results_only_continue and _results_only(turn):
                continue
            if self._counts_as_user_v4(_role_of(turn), i):
                return i
        return -1

    # -- shared pieces ------------------------------------------------------------------

    def _drop_reasoning(self, turns: Sequence[_TurnT], last_user: int) -> list[_TurnT]:
        """Thinking mode with dropping: reasoning and developer turns before the last user go."""
        if not (self.options.thinking and self.options.drop_thinking):
            return list(turns)
        kept: list[_TurnT] = []
        for i, turn in enumerate(turns):
            if i >= last_user or isinstance(turn, _UserTurn):
                kept.append(turn)
            elif turn.role == "assistant":
                kept.append(replace(turn, reasoning=None))
            elif turn.role != "developer":
                kept.append(turn)
            else:
                self.notes.append(
                    f"{turn.param}: a developer message before the last user turn is left out "
                    "in thinking mode, as the reference encoders do; send instructions as a "
                    "system message to keep them"
                )
        return kept

    def _header(self, opens_reasoning: bool) -> None:
        self.out.template(ASSISTANT)
        self._think_token(opens_reasoning)

    def _think_token(self, opens_reasoning: bool) -> None:
        self.out.template(THINK_OPEN if opens_reasoning else THINK_CLOSE)
        self.starts_in = "reasoning" if opens_reasoning else "content"

    def _system_extras(self, message: Message) -> None:
        visible = [
            tool for tool in message.tools if not (tool.deferred and self.options.schema_references)
        ]
        if visible:
            before, after = self.options.tools_section.split("{tool_schemas}")
            self.out.template(_SEPARATOR + before)
            self.out.text("\n".join(tool.schema_line() for tool in visible))
            self.out.template(after)
        if message.response_format is not None:
            before, after = RESPONSE_FORMAT.split("{schema}")
            self.out.template(_SEPARATOR + before)
            self.out.text(to_json(message.response_format))
            self.out.template(after)

    def _user_blocks(self, blocks: Sequence[Part | Message]) -> None:
        self._joined(blocks, self._user_block)

    def _user_block(self, block: Part | Message) -> None:
        if not isinstance(block, Message):
            self._part(block)
            return
        parts = block.parts
        if len(parts) == 1 and isinstance(parts[0], TextPart):  # the usual result: one text
            self.out.text(f"<tool_result>{parts[0].text}</tool_result>")
            return
        self.out.template("<tool_result>")
        self._tool_result_body(block)
        self.out.template("</tool_result>")

    def _tool_result_body(self, message: Message) -> None:
        """References first, then the other parts, separated by blank lines."""
        parts = message.parts
        if len(parts) == 1:  # the usual result: one text
            self._part(parts[0])
            return
        ordered = sorted(parts, key=lambda part: not isinstance(part, ToolReferencePart))
        self._joined(ordered, self._part)

    def _joined(self, items: Sequence[_ItemT], write: Callable[[_ItemT], None]) -> None:
        """Write items with a blank line between neighbours, as the encoders join parts."""
        for i, item in enumerate(items):
            if i:
                self.out.template(_SEPARATOR)
            write(item)

    def _part(self, part: Part) -> None:
        if isinstance(part, TextPart):
            self.out.text(part.text)
        elif isinstance(part, ImagePart):
            self.out.template(IMAGE)
        elif isinstance(part, ToolReferencePart):
            self.out.text(self._reference(part))
        # a RawBlockPart has no place in the prompt (its reader noted it)

    def _reference(self, reference: ToolReferencePart) -> str:
        tool = self.tools_by_name.get(reference.name)
        if tool is None:
            self.notes.append(
                f"tool_reference to {reference.name!r}, which no tool definition names; "
                "rendered as the bare name"
            )
            return reference.name
        if tool.deferred and self.options.schema_references:
            return tool.schema_line()
        return tool.name

    def _assistant(self, message: Message, with_reasoning: bool, is_last: bool) -> None:
        continuing = is_last and self.options.continue_final_message
        reasoning = message.reasoning or ""
        content = message.text()
        self.starts_in = "content"
        if with_reasoning:
            if continuing:
                self.prefix_start = self.out.length
            self.out.text(reasoning)
            if continuing and reasoning and not content and not message.tool_calls:
                self.starts_in = "reasoning"
            else:
                self.out.template(THINK_CLOSE)
        if continuing and self.starts_in == "content":
            self.prefix_start = self.out.length
        self.out.text(content)
        if message.tool_calls:
            self._calls_block(message)
        if not (message.wo_eos or continuing):
            self.out.template(EOS)

    def check_read_backs(self, prompt: str) -> None:
        """Report call blocks whose values hold DSML text that the parser reads as markup."""
        for item in self._read_backs:
            block = prompt[item.start : item.end]
            parsed = parse(block, self.options.dialect, start_in="content")
            sent = [(call.name, to_json(call.arguments)) for call in item.message.tool_calls]
            if [(call.name, to_json(call.arguments)) for call in parsed.calls] != sent:
                self.notes.append(
                    f"{item.message.param}.tool_calls: a value holds DSML tag text that a "
                    "parser takes for markup, so the calls do not read back as written"
                )

    def _calls_block(self, message: Message) -> None:
        """The calls as one block, written in one go; written piece by piece (and read back)
        when a caller's text in it holds DSML."""
        markup = self._markup
        written = markup.block(message.tool_calls, self.cache)
        if written is not None:
            self.out.marked(written)
            return
        out = self.out
        start = out.length
        out.template(markup.block_open)
        for i, call in enumerate(message.tool_calls):
            if i:
                out.template("\n")
            for j, text in enumerate(markup.invoke_texts(call)):
                (out.text if j % 2 else out.template)(text)
        out.template(markup.block_close)
        if self._values_hold_markup(message):
            self._read_backs.append(_ReadBack(message, start, out.length))

    def _values_hold_markup(self, message: Message) -> bool:
        """Whether a value holds DSML text; a value with the closing sequence is noted."""
        holds_markup = False
        for i, call in enumerate(message.tool_calls):
            for key, value in call.arguments.items():
                text = value if isinstance(value, str) else to_json(value)
                if "DSML" in text:
                    holds_markup = True
                    self._note_closing_sequence(message, i, key, text)
        return holds_markup

    def _note_closing_sequence(self, message: Message, i: int, key: str, text: str) -> None:
        if self._closing_sequence.search(text):
            self.notes.append(
                f"{message.param}.tool_calls[{i}]: parameter {key!r} holds the whole DSML "
                "closing sequence, which the text format cannot represent; a parser may end "
                "the call there"
            )


@dataclass(frozen=True, eq=False)
class _Markup:
    """The tool-call markup strings of one dialect, around the caller's names and values.

    Markup that always stands together is one string (one write): the end of the invoke
    name with the first parameter's opening, a parameter's closing tag with the next one's
    opening or with the invoke's closing tag. Made once per dialect's tag names (``tags``,
    see :func:`_markup_of`).
    """

    tags: tuple[str, str, str]
    block_open: str
    invoke_open: str
    first_parameter_open: str  # '">' ending the invoke name, then the parameter opening
    next_parameter_open: str  # the previous parameter's closing tag, then the opening
    string_value: str
    json_value: str
    invoke_close: str  # the last parameter's closing tag, then the invoke's
    invoke_close_bare: str  # an invoke without parameters: '">', then its closing tag
    block_close: str

    def invoke_texts(self, call: HistoryCall) -> list[str]:
        """One call's invoke: template markup (even items) and the caller's name, keys and
        values (odd items)."""
        arguments = call.arguments
        if not arguments:
            return [self.invoke_open, call.name, self.invoke_close_bare]
        next_open, string_value, json_value = (
            self.next_parameter_open,
            self.string_value,
            self.json_value,
        )
        texts = [self.invoke_open, call.name]
        append = texts.append  # appends one by one: no tuple made per parameter
        for key, value in arguments.items():
            append(next_open)
            append(key)
            if isinstance(value, str):
                append(string_value)
                append(value)
            else:
                append(json_value)
                append(to_json(value))
        texts[2] = self.first_parameter_open
        append(self.invoke_close)
        return texts

    def block(self, calls: Sequence[HistoryCall], cache: RenderCache | None) -> str | None:
        """A calls block's text; None when a caller's text in it holds DSML.

        Every marker in it is the markup's: no caller's text holds one. The same names and
        arguments texts always give the same block, so with a ``cache`` calls read from text
        reuse the block written for an earlier request's copy of them.
        """
        sources = tuple(call.arguments_text for call in calls)
        key = None
        if cache is not None and None not in sources:
            key = (self.tags, tuple(call.name for call in calls), sources)
            kept = cache.block(key)
            if kept is not None:
                return kept
        invokes: list[str] = []
        for call in calls:
            texts = self.invoke_texts(call)
            text = "".join(texts)
            # The markup holds DSML 2k + 2 times for k parameters (len(texts) is 4k + 3);
            # any more are the caller's (no markup string starts or ends with part of it).
            if text.count("DSML") != len(texts) // 2 + 1:
                return None
            invokes.append(text)
        written = self.block_open + "\n".join(invokes) + self.block_close
        if key is not None and cache is not None:
            cache.keep_block(key, sum(len(text or "") for text in sources), written)
        return written


def _markup_of(tags: tuple[str, str, str]) -> _Markup:
    """The markup for a dialect's tag names (block, invoke, parameter)."""
    block, invoke, parameter = tags
    invoke_open = f'<{MARKER}{invoke} name="'
    parameter_open = f'<{MARKER}{parameter} name="'
    parameter_close = f"</{MARKER}{parameter}>"
    invoke_close = f"\n</{MARKER}{invoke}>"
    return _Markup(
        tags=tags,
        block_open=f"\n\n<{MARKER}{block}>\n",
        invoke_open=invoke_open,
        first_parameter_open='">\n' + parameter_open,
        next_parameter_open=f"{parameter_close}\n{parameter_open}",
        string_value='" string="true">',
        json_value='" string="false">',
        invoke_close=parameter_close + invoke_close,
        invoke_close_bare='">\n' + invoke_close,
        block_close=f"\n</{MARKER}{block}>",
    )


#: The markup of the known dialects; another dialect's is made when it renders.
_MARKUPS = {
    tags: _markup_of(tags) for tags in {(d.block, d.invoke, d.parameter) for d in DIALECTS.values()}
}


def _merge_user_turns(conversation: Sequence[Message]) -> list[_UserTurn | Message]:
    """V4-family user turns: tool messages and user messages merge, results sort by call."""
    turns: list[_UserTurn | Message] = []
    call_order: dict[str, int] = {}
    to_sort: list[tuple[_UserTurn, dict[str, int]]] = []  # each turn once, with its call order
    for message in conversation:
        previous = turns[-1] if turns else None
        if message.role == "assistant":
            if message.tool_calls:
                call_order = {call.id: i for i, call in enumerate(message.tool_calls) if call.id}
            turns.append(message)
        elif message.role == "tool":
            if not isinstance(previous, _UserTurn):
                previous = _UserTurn()
                turns.append(previous)
            previous.blocks.append(message)
        elif message.role == "user":
            if not isinstance(previous, _UserTurn) or previous.task is not None:
                previous = _UserTurn()
                turns.append(previous)
            previous.blocks.extend(message.parts)
            previous.task = message.task or previous.task
        else:
            turns.append(message)
        last = turns[-1]
        if call_order and isinstance(last, _UserTurn) and not (to_sort and to_sort[-1][0] is last):
            to_sort.append((last, call_order))
    for turn, order in to_sort:  # once each: a stable sort, as if re-sorted at every result
        _sort_results(turn, order)
    return turns


def _sort_results(turn: _UserTurn, call_order: Mapping[str, int]) -> None:
    """Put a turn's tool results in the order of the calls they answer (stable)."""
    slots = [i for i, block in enumerate(turn.blocks) if isinstance(block, Message)]
    if len(slots) < 2:
        return
    results = [block for block in turn.blocks if isinstance(block, Message)]
    results.sort(key=lambda result: call_order.get(result.tool_call_id or "", 0))
    for slot, result in zip(slots, results, strict=True):
        turn.blocks[slot] = result


def _results_only(turn: _UserTurn | Message) -> bool:
    return isinstance(turn, _UserTurn) and all(isinstance(b, Message) for b in turn.blocks)


def _role_of(turn: _UserTurn | Message) -> str:
    return "user" if isinstance(turn, _UserTurn) else turn.role


def _last_user_v32(messages: Sequence[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role in ("user", "developer"):
            return i
    return -1


def _closing_sequence_pattern(dialect: Dialect) -> re.Pattern[str]:
    """``</P> </I> </B>`` (any whitespace, either marker spelling): a call ends there."""
    marker = f"(?:{re.escape(MARKER)}|\\|DSML\\|)"
    closers = [
        f"</{marker}{re.escape(name)}>"
        for name in (dialect.parameter, dialect.invoke, dialect.block)
    ]
    return re.compile(r"\s*".join(closers))
