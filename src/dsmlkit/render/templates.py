"""The reference encoders' string constants, as data keyed by dialect.

Every string here is what DeepSeek's encoders put in a prompt, byte for byte (see
``shared/spec/templates.md`` for the sources). Placeholders use :meth:`str.format` names;
the tag spellings of each dialect are filled in once, at import time, so a rendered tools
section only needs its ``{tool_schemas}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

from dsmlkit.dialects import BOS, EOS, MARKER, THINK_CLOSE, THINK_OPEN, V3_2, V4, V4_1, Dialect

USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SYSTEM = "<｜System｜>"
LATEST_REMINDER = "<｜latest_reminder｜>"
IMAGE = "<｜deepseek_image｜>"

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

#: Strings that are one special/added token when the template writes them.
SPECIAL_TOKENS: tuple[str, ...] = (
    BOS,
    EOS,
    USER,
    ASSISTANT,
    SYSTEM,
    LATEST_REMINDER,
    IMAGE,
    THINK_OPEN,
    THINK_CLOSE,
    MARKER,
    *TASK_TOKENS.values(),
)

#: Finds special tokens inside template text (longest first, so none shadows another).
SPECIAL_TOKEN_PATTERN = re.compile(
    "|".join(re.escape(token) for token in sorted(SPECIAL_TOKENS, key=len, reverse=True))
)

RESPONSE_FORMAT = (
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"
)

# The V3.2 tools section as DeepSeek's own golden renders it (blank lines included).
_V32_TOOLS_OFFICIAL = """## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml}function_calls>" block like the following as part of your reply to the user:
<{dsml}function_calls>
<{dsml}invoke name="$FUNCTION_NAME">
<{dsml}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}parameter>
...
</{dsml}invoke>
<{dsml}invoke name="$FUNCTION_NAME2">
...
</{dsml}invoke>
</{dsml}function_calls>

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

<{dsml}function_calls>
...
</{dsml}function_calls>

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


def _fill_tags(template: str, dialect: Dialect) -> str:
    return template.format(
        dsml=MARKER,
        block=dialect.block,
        invoke=dialect.invoke,
        parameter=dialect.parameter,
        think_open=THINK_OPEN,
        think_close=THINK_CLOSE,
    )


@dataclass(frozen=True)
class DialectTemplates:
    """The prompt strings of one dialect.

    ``tools_sections`` maps a template variant name to the tools section text, which has a
    single ``{tool_schemas}`` placeholder; the first entry is the default.
    """

    dialect: Dialect
    tools_sections: MappingProxyType[str, str]


TEMPLATES: MappingProxyType[str, DialectTemplates] = MappingProxyType(
    {
        V3_2.name: DialectTemplates(
            V3_2,
            MappingProxyType(
                {
                    "official": _fill_tags(_V32_TOOLS_OFFICIAL, V3_2),
                    "compact": _fill_tags(_V32_TOOLS_COMPACT, V3_2),
                }
            ),
        ),
        V4.name: DialectTemplates(V4, MappingProxyType({"official": _fill_tags(_V4_TOOLS, V4)})),
        V4_1.name: DialectTemplates(
            V4_1, MappingProxyType({"official": _fill_tags(_V4_TOOLS, V4_1)})
        ),
    }
)
