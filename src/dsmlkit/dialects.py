"""DeepSeek DSML dialects as data: one :class:`Dialect` value holds everything that differs.

A dialect is its tag spellings, the prompt layout and the few template features the
renderer needs, its tools-section texts and its reasoning-effort tables. The renderer and
the parser read only these fields, so a new dialect is one new value (no code change).

==========  ===================  ============  ==============  =========================
dialect     block                invoke        parameter       example opener
==========  ===================  ============  ==============  =========================
``v3.2``    ``function_calls``   ``invoke``    ``parameter``   ``<｜DSML｜function_calls>``
``v4``      ``tool_calls``       ``invoke``    ``parameter``   ``<｜DSML｜tool_calls>``
``v4.1``    `` calls``           `` invoke``   `` parameter``  ``<｜DSML｜ calls>``
==========  ===================  ============  ==============  =========================

In V4.1 the leading space is part of every tag name, open and close. Every string below
is what DeepSeek's reference encoders put in a prompt, byte for byte (``docs/rendering.md``,
Sources, names the encoder copies they come from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from dsmlkit.errors import CallerError, InvalidRequest

#: The DSML marker as the tokenizer writes it (U+FF5C on both sides).
MARKER = "｜DSML｜"
#: The legacy ASCII spelling some deployments and fine-tunes emit.
ASCII_MARKER = "|DSML|"

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

#: Quick-instruction task tokens (V4 and V4.1), by the ``task`` value of a message.
TASK_TOKENS = MappingProxyType(
    {
        "action": "<｜action｜>",
        "query": "<｜query｜>",
        "authority": "<｜authority｜>",
        "domain": "<｜domain｜>",
        "title": "<｜title｜>",
        "read_url": "<｜read_url｜>",
    }
)

#: Integer reasoning budgets a table with budgets accepts.
BUDGET_RANGE = range(1, 101)


@dataclass(frozen=True)
class EffortTable:
    """One checkpoint's reasoning-effort levels.

    ``levels`` pairs each level name with the text rendered at the start of the first
    message in thinking mode. ``budgets`` (V4.1) pairs level names with their integer
    budget; a table with budgets also accepts any integer from 1 to 100, written with
    ``budget_line``. Tuples, not dicts, so a :class:`Dialect` stays hashable.
    """

    name: str
    description: str
    levels: tuple[tuple[str, str], ...]
    default: str
    budgets: tuple[tuple[str, int], ...] | None = None
    budget_line: str = ""

    @property
    def prefixes(self) -> dict[str, str]:
        """Level name → the text it puts before the first message."""
        return dict(self.levels)

    @property
    def numeric(self) -> bool:
        """Whether integer efforts (1-100) are accepted."""
        return self.budgets is not None

    def prefix(self, effort: str | int | None) -> str:
        """The text for ``effort`` (None = the default level); raises for unknown values."""
        prefixes = self.prefixes
        if effort is None:
            return prefixes[self.default]
        if isinstance(effort, str) and effort.isdecimal():
            effort = int(effort)
        if isinstance(effort, int) and not isinstance(effort, bool):
            if not self.numeric:
                raise InvalidRequest(
                    f"integer reasoning effort {effort} needs a dialect with numeric effort "
                    f"(v4.1); use one of: {', '.join(prefixes)}",
                    "reasoning_effort",
                )
            if effort not in BUDGET_RANGE:
                raise InvalidRequest(
                    f"reasoning effort {effort} is out of range; use an integer from 1 to 100 "
                    f"or one of: {', '.join(prefixes)}",
                    "reasoning_effort",
                )
            return self.budget_line.format(budget=effort)
        if isinstance(effort, str) and effort in prefixes:
            return prefixes[effort]
        hint = " (for no reasoning use mode='chat')" if effort == "none" else ""
        integers = " or an integer from 1 to 100" if self.numeric else ""
        raise InvalidRequest(
            f"unknown reasoning effort {effort!r} for the {self.name!r} table; "
            f"use one of: {', '.join(prefixes)}{integers}{hint}",
            "reasoning_effort",
        )


@dataclass(frozen=True)
class Vision:
    """How a vision checkpoint spends prompt tokens on an image: the settings of its image
    processor (the figures of vLLM 0.34's DeepSeek-V4.1 config defaults).

    An image is scaled up to at least ``min_pixels`` pixels, cut into ``patch_size``-pixel
    patches, and ``downsample_ratio`` patches a side make one token; a grid of more than
    ``max_tokens`` tokens is shrunk (aspect kept) until it fits. ``max_wh_ratio``: images
    wider than that many heights are narrowed to it first (None: never).
    """

    patch_size: int = 14
    downsample_ratio: int = 3
    max_tokens: int = 1024
    min_pixels: int = 295936
    max_wh_ratio: float | None = None


#: DeepSeek-V4.1's image processor settings (vLLM 0.34 ``DeepseekV41Config``'s defaults:
#: ``patch_size`` 14, ``downsample_ratio`` 3, ``max_image_tokens`` 1024, ``min_pixels``
#: 295936, ``max_wh_ratio`` unset).
V41_VISION = Vision()


@dataclass(frozen=True)
class Dialect:
    """Everything about one DeepSeek DSML dialect that the renderer and parser need.

    * ``block``, ``invoke``, ``parameter``: the tag names (leading spaces included).
    * ``layout``: the prompt layout. ``"v3.2"``: each user turn has its own assistant
      header and tool results follow the assistant turn as ``<function_results>``; no
      latest_reminder, tasks or image placeholder. ``"v4"``: tool results are
      ``<tool_result>`` blocks of a user turn, and tools anywhere keep all reasoning.
    * ``system_token``: system text is introduced by ``<｜System｜>`` (first system
      message and effort prefix; later system messages count as user turns) — V4.1.
    * ``tools_sections``: template variant → tools-section template; the first is the
      default. Placeholders: ``{dsml}``, ``{block}``, ``{invoke}``, ``{parameter}``,
      ``{think_open}``, ``{think_close}`` and ``{{tool_schemas}}``.
    * ``effort_tables``: the checkpoints' reasoning-effort tables; the first is the
      default; none means the dialect has no effort levels.
    * ``vision``: how its vision checkpoints count image tokens; None: the dialect has no
      image token (V3.2), so a request with an image cannot be rendered for it.
    """

    name: str
    block: str
    invoke: str
    parameter: str
    layout: Literal["v3.2", "v4"] = "v4"
    system_token: bool = False
    tools_sections: tuple[tuple[str, str], ...] = ()
    effort_tables: tuple[EffortTable, ...] = ()
    vision: Vision | None = None
    #: ``tools_sections`` with the tags filled in, made once with the value (the renderer
    #: asks for one on every request with tools).
    filled_sections: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        filled = tuple(
            (variant, _fill_tags(template, self.block, self.invoke, self.parameter))
            for variant, template in self.tools_sections
        )
        object.__setattr__(self, "filled_sections", filled)

    def block_open(self, marker: str = MARKER) -> str:
        return f"<{marker}{self.block}>"

    def block_close(self, marker: str = MARKER) -> str:
        return f"</{marker}{self.block}>"

    def invoke_open(self, name: str, marker: str = MARKER) -> str:
        return f'<{marker}{self.invoke} name="{name}">'

    def invoke_close(self, marker: str = MARKER) -> str:
        return f"</{marker}{self.invoke}>"

    def parameter_open(self, name: str, is_string: bool, marker: str = MARKER) -> str:
        flag = "true" if is_string else "false"
        return f'<{marker}{self.parameter} name="{name}" string="{flag}">'

    def parameter_close(self, marker: str = MARKER) -> str:
        return f"</{marker}{self.parameter}>"

    def tools_section(self, variant: str | None = None) -> str:
        """The tools-section text of ``variant`` (None: the first), tags filled in; its one
        placeholder left is ``{tool_schemas}``."""
        if variant is None:
            return self.filled_sections[0][1]
        for name, text in self.filled_sections:
            if name == variant:
                return text
        raise InvalidRequest(
            f"unknown template variant {variant!r} for {self.name}; "
            f"use one of: {', '.join(name for name, _ in self.tools_sections)}",
            "template_variant",
        )

    def effort_table(self, name: str | None = None) -> EffortTable | None:
        """The named effort table (None: the first); None when the dialect has no effort."""
        if not self.effort_tables:
            if name is not None:
                raise InvalidRequest(f"{self.name} has no reasoning-effort tables", "effort_table")
            return None
        if name is None:
            return self.effort_tables[0]
        for table in self.effort_tables:
            if table.name == name:
                return table
        known = ", ".join(table.name for table in self.effort_tables)
        raise InvalidRequest(
            f"unknown effort table {name!r} for {self.name}; use one of: {known}",
            "effort_table",
        )


def _fill_tags(template: str, block: str, invoke: str, parameter: str) -> str:
    return template.format(
        dsml=MARKER,
        block=block,
        invoke=invoke,
        parameter=parameter,
        think_open=THINK_OPEN,
        think_close=THINK_CLOSE,
    )


# --- the reference encoders' texts ---------------------------------------------------------

# The V3.2 tools section as DeepSeek's own golden renders it (blank lines included).
_V32_TOOLS_OFFICIAL = """## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml}{block}>" block like the following as part of your reply to the user:
<{dsml}{block}>
<{dsml}{invoke} name="$FUNCTION_NAME">
<{dsml}{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}{parameter}>
...
</{dsml}{invoke}>
<{dsml}{invoke} name="$FUNCTION_NAME2">
...
</{dsml}{invoke}>
</{dsml}{block}>

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

<{dsml}{block}>
...
</{dsml}{block}>

<function_results>
...
</function_results>

{think_open}...thinking about results{think_close}

Here are the functions available in JSONSchema format:
<functions>
{{tool_schemas}}
</functions>
"""  # noqa: E501

# The vLLM and SGLang copies store the V3.2 tools section without those seven blank lines.
_V32_TOOLS_COMPACT = _V32_TOOLS_OFFICIAL.replace("\n\n", "\n")

# The V4 / V4.1 tools section; only the tag names differ between the two.
_V4_TOOLS = """## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{dsml}{block}>" block like the following:

<{dsml}{block}>
<{dsml}{invoke} name="$TOOL_NAME">
<{dsml}{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}{parameter}>
...
</{dsml}{invoke}>
<{dsml}{invoke} name="$TOOL_NAME2">
...
</{dsml}{invoke}>
</{dsml}{block}>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {think_open}), you MUST output your complete reasoning inside {think_open}...{think_close} BEFORE any tool calls or final response.

Otherwise, output directly after {think_close} with tool calls or final response.

### Available Tool Schemas

{{tool_schemas}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""  # noqa: E501

#: V4 preview "max" text; the 0731 checkpoint uses the same words for "high".
EFFORT_ABSOLUTE_MAXIMUM = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"  # noqa: E501
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"  # noqa: E501
)
#: V4 0731 "max" text.
EFFORT_BEYOND_MAXIMUM = (
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\n"  # noqa: E501
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n"  # noqa: E501
)
#: V4.1 effort line; ``budget`` is an integer from 1 to 100.
EFFORT_BUDGET_LINE = (
    "Reasoning Effort: {budget} "
    "(range 1-100, the higher the value, the more thorough the reasoning)\n\n"
)


def _budget_table(name: str, description: str, budgets: dict[str, int]) -> EffortTable:
    levels = tuple(
        (level, EFFORT_BUDGET_LINE.format(budget=value)) for level, value in budgets.items()
    )
    return EffortTable(
        name,
        description,
        levels,
        default="high",
        budgets=tuple(budgets.items()),
        budget_line=EFFORT_BUDGET_LINE,
    )


# Effort tables. The reference encoders know low, high (and xhigh), max; DeepSeek's API
# documents more names, mapped here: ``minimal`` is ``low``, ``medium`` the table's default
# level, ``xhigh`` is ``high`` where the checkpoint has no such level, ``ultra`` is ``max``.
_V4_PREVIEW = EffortTable(
    "preview",
    "V4-Flash / V4-Pro preview encoder: only max adds a text",
    (
        ("minimal", ""),
        ("low", ""),
        ("medium", ""),
        ("high", ""),
        ("xhigh", ""),
        ("max", EFFORT_ABSOLUTE_MAXIMUM),
        ("ultra", EFFORT_ABSOLUTE_MAXIMUM),
    ),
    default="high",
)
_V4_0731 = EffortTable(
    "0731",
    "V4-Flash-0731 / Vision-Exp encoder: high and max add texts, low is the default",
    (
        ("minimal", ""),
        ("low", ""),
        ("medium", ""),
        ("high", EFFORT_ABSOLUTE_MAXIMUM),
        ("xhigh", EFFORT_ABSOLUTE_MAXIMUM),
        ("max", EFFORT_BEYOND_MAXIMUM),
        ("ultra", EFFORT_BEYOND_MAXIMUM),
    ),
    default="low",
)
_V41_RELEASE = _budget_table(
    "release",
    "V4.1-Flash HF release encoder: low 50, high 75, max 100, default 75",
    {"minimal": 50, "low": 50, "medium": 75, "high": 75, "xhigh": 75, "max": 100, "ultra": 100},
)
_V41_PREVIEW = _budget_table(
    "preview",
    "V4.1 pre-release encoder drop (vLLM/SGLang copies): low 25, high 50, xhigh 75, max 100, "
    "default 50",
    {"minimal": 25, "low": 25, "medium": 50, "high": 50, "xhigh": 75, "max": 100, "ultra": 100},
)

V3_2 = Dialect(
    name="v3.2",
    block="function_calls",
    invoke="invoke",
    parameter="parameter",
    layout="v3.2",
    tools_sections=(("official", _V32_TOOLS_OFFICIAL), ("compact", _V32_TOOLS_COMPACT)),
)
V4 = Dialect(
    name="v4",
    block="tool_calls",
    invoke="invoke",
    parameter="parameter",
    tools_sections=(("official", _V4_TOOLS),),
    effort_tables=(_V4_PREVIEW, _V4_0731),
    vision=V41_VISION,
)
V4_1 = Dialect(
    name="v4.1",
    block=" calls",
    invoke=" invoke",
    parameter=" parameter",
    system_token=True,
    tools_sections=(("official", _V4_TOOLS),),
    effort_tables=(_V41_RELEASE, _V41_PREVIEW),
    vision=V41_VISION,
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (V3_2, V4, V4_1)}
#: Other spellings of the names, taken wherever a dialect is named: the CLI's ``--dialect``,
#: ``DSMLKIT_DIALECT``, ``--config`` files and request fields (all go through get_dialect).
DIALECT_ALIASES: dict[str, str] = {
    "v32": "v3.2",
    "3.2": "v3.2",
    "4": "v4",
    "v41": "v4.1",
    "4.1": "v4.1",
}
DEFAULT_DIALECT = V4_1


def get_dialect(name: str | Dialect) -> Dialect:
    """Look a dialect up by name (``v3.2``, ``v4``, ``v4.1``) or alias (:data:`DIALECT_ALIASES`),
    ignoring case and surrounding spaces.

    A :class:`Dialect` value is returned as it is, so a custom dialect works anywhere a
    name does.
    """
    if isinstance(name, Dialect):
        return name
    if isinstance(name, str):
        key = name.strip().lower()
        dialect = DIALECTS.get(DIALECT_ALIASES.get(key, key))
        if dialect is not None:
            return dialect
    known = ", ".join(DIALECTS)
    aliases = ", ".join(DIALECT_ALIASES)
    raise CallerError(f"unknown dialect {name!r}; use one of: {known} (or an alias: {aliases})")
