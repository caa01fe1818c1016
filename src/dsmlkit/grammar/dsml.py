"""The DSML grammar of one tool set: what a DeepSeek model may write, tag for tag.

The output is ``[reasoning "</think>"] content ["\\n\\n" block]``; the block is laid out
exactly as the renderer writes it (parsing.md's well-formed output). Text the parser would
read as markup cannot appear where it does not belong:

* reasoning and content never hold ``<｜`` (every special token, the end of sentence
  among them, and every fullwidth DSML tag start), an ASCII DSML opener (``<|DSML`` …), a
  DSML closer's start (``</｜DSML``, ``</|DSML`` …), ``<think>`` or ``</think>``;
* a string value never holds ``<｜``, an ASCII DSML opener, or a parameter closer followed
  (after whitespace) by another DSML closer's start: what the parser's structural rule
  could take for the end of the value. Any other closer text (``</｜DSML｜ parameter> ok``,
  ``</｜DSML｜ invoke>`` …) is value text;
* JSON strings inside ``string="false"`` values hold no ``<｜``, ``<|``, ``</｜`` or ``</|``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsmlkit.dialects import THINK_CLOSE, THINK_OPEN, Dialect, get_dialect
from dsmlkit.errors import CallerError
from dsmlkit.grammar.ebnf import RuleSet, alternatives, joined, literal
from dsmlkit.grammar.guard import Pattern, guarded_text, pattern
from dsmlkit.grammar.schema import SchemaRules, check_required

_BARS = frozenset("｜|")
#: What the parser's ``\s`` matches (str.isspace).
WHITESPACE = frozenset(
    "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
#: ``<｜`` starts every special token (the end of sentence among them) and every fullwidth
#: DSML opener; the ASCII openers start ``<|DSML``, ``<||DSML`` or ``<|｜DSML``.
_OPENERS = (pattern("<｜"), pattern("<|", (_BARS, "?"), "DSML"))

_LEADS = ("｜", "|", "｜｜", "｜|", "|｜", "||")
#: What reasoning and content never hold: the openers above and every closer's start, as
#: literals for xgrammar's TagDispatch (which compiles them into one small automaton).
TEXT_EXCLUDES = (
    "<｜",
    *(f"<{lead}DSML" for lead in _LEADS if lead[0] == "|"),
    *(f"</{lead}DSML" for lead in _LEADS),
    THINK_OPEN,
    THINK_CLOSE,
)
#: Patterns a parameter value never holds. The last is a parameter closer (in any
#: spelling the lenient parser reads, and some more) followed by another DSML closer.
VALUE_PATTERNS: tuple[Pattern, ...] = (
    *_OPENERS,
    pattern(
        "</", _BARS, (_BARS, "?"), "DSML", _BARS, (_BARS, "?"), (" ", "?"), (" ", "?"), "p",
        (_LETTERS, "*"), (WHITESPACE, "*"), ">", (WHITESPACE, "*"), "</", _BARS,
    ),
)  # fmt: skip

#: JSON strings inside ``string="false"`` values hold no DSML tag start at all (every
#: value pattern starts with one of these).
JSON_STRING_PATTERNS: tuple[Pattern, ...] = (pattern("<", ("/", "?"), _BARS),)

TOOL_CHOICES = ("auto", "required", "none")


@dataclass(frozen=True)
class Tool:
    """A function tool: its name and its parameters' object schema."""

    name: str
    parameters: Mapping[str, Any]


def read_tools(tools: Iterable[Any]) -> list[Tool]:
    """OpenAI function tools or bare function dicts (``input_schema`` works too)."""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise CallerError("tools must be a list of function tools")
    found: list[Tool] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, Mapping):
            raise CallerError(f"{where} must be an object, got {type(tool).__name__}")
        kind = tool.get("type", "function")
        if kind != "function" and not (kind == "custom" and "input_schema" in tool):
            raise CallerError(f"{where}: only function tools can be constrained, not {kind!r}")
        function = tool.get("function", tool)
        if not isinstance(function, Mapping):
            raise CallerError(f"{where}.function must be an object")
        name = function.get("name")
        if not isinstance(name, str) or not name or '"' in name or "\n" in name:
            raise CallerError(f'{where}: the name must be a non-empty string without " or newline')
        if any(t.name == name for t in found):
            raise CallerError(f"{where}: tool {name!r} is declared twice; keep one")
        parameters = function.get("parameters", function.get("input_schema"))
        found.append(Tool(name, _check_parameters(parameters, f"{where}.function.parameters")))
    return found


def _check_parameters(schema: Any, where: str) -> Mapping[str, Any]:
    if schema is None:
        return {}
    if not isinstance(schema, Mapping):
        raise CallerError(f"{where} must be a JSON schema object")
    if schema.get("type", "object") != "object":
        raise CallerError(f"{where}: the parameters schema must have type 'object'")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise CallerError(f"{where}.properties must be an object")
    for key in properties:
        if not isinstance(key, str) or '"' in key or "\n" in key:
            raise CallerError(f'{where}.properties: the name {key!r} may not hold " or newline')
    check_required(schema.get("required", []), properties, where)
    return schema


def ebnf(
    dialect: str | Dialect,
    tools: Iterable[Any],
    *,
    tool_choice: str = "auto",
    thinking: bool = False,
    parallel: bool = True,
) -> str:
    """The grammar as xgrammar EBNF text (root rule ``root``).

    ``tools``: OpenAI function tools (``{"type": "function", "function": {...}}``) or bare
    function dicts. ``thinking``: the output starts inside reasoning (the prompt ended with
    ``<think>``). Caller mistakes raise :class:`~dsmlkit.errors.CallerError`.
    """
    spelling = get_dialect(dialect)
    declared = read_tools(tools)
    chosen = _chosen(tool_choice, declared)
    rules = RuleSet()
    excludes = ", ".join(map(literal, TEXT_EXCLUDES))
    text = rules.define("text", f"TagDispatch(loop_after_dispatch=false, excludes=({excludes}))")
    if chosen is None:
        body = text
    else:
        builder = _Builder(rules, spelling)
        invokes = [builder.invoke(i, tool) for i, tool in enumerate(declared) if tool in chosen]
        invoke = alternatives(invokes)
        if parallel and tool_choice in ("auto", "required"):
            invoke = f'{invoke} ("\\n" {invoke})*'
        block = f"{literal(chr(10) * 2 + spelling.block_open() + chr(10))} {invoke} "
        block += literal("\n" + spelling.block_close())
        rules.define("block", block)
        body = f"{text} block?" if tool_choice == "auto" else f"{text} block"
    root = f"{text} {literal(THINK_CLOSE)} {body}" if thinking else body
    rules.define("root", root)
    return rules.text()


def _chosen(tool_choice: Any, declared: Sequence[Tool]) -> list[Tool] | None:
    """The tools a call may use, or None when no call may be made."""
    if not isinstance(tool_choice, str):
        raise CallerError("tool_choice must be 'auto', 'required', 'none' or a tool's name")
    if tool_choice == "none" or (tool_choice == "auto" and not declared):
        return None
    if tool_choice in TOOL_CHOICES:
        if not declared:
            raise CallerError("tool_choice 'required' needs at least one tool")
        return list(declared)
    for tool in declared:
        if tool.name == tool_choice:
            return [tool]
    names = ", ".join(repr(t.name) for t in declared) or "(no tools given)"
    raise CallerError(
        f"tool_choice {tool_choice!r} names no declared tool; use 'auto', 'required', "
        f"'none' or one of: {names}"
    )


class _Builder:
    """Rules for invokes and parameters of one dialect."""

    def __init__(self, rules: RuleSet, dialect: Dialect) -> None:
        self.rules = rules
        self.dialect = dialect
        self.schemas = SchemaRules(rules, JSON_STRING_PATTERNS)

    @property
    def raw_value(self) -> str:
        if "value0" not in self.rules:
            guarded_text(self.rules, "value", VALUE_PATTERNS)
        return "value0"

    def invoke(self, index: int, tool: Tool) -> str:
        d = self.dialect
        prefix = f"tool{index}"
        properties: Mapping[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        where = f"tools[{index}].function.parameters.properties"
        members = [
            (
                self._parameter(f"{prefix}_p{j}", key, schema, tool.parameters, f"{where}.{key}"),
                key in required,
            )
            for j, (key, schema) in enumerate(properties.items())
        ]
        params = joined(self.rules, prefix, members, '"\\n"')
        opener = literal(d.invoke_open(tool.name) + "\n")
        return self.rules.define(prefix, f"{opener} {params} {literal(chr(10) + d.invoke_close())}")

    def _parameter(self, name: str, key: str, schema: Any, root: Any, where: str) -> str:
        d = self.dialect
        strings: list[str] = []
        others = []
        for kind, data in self.schemas.choices(schema, root, where):
            if kind == "literal" and isinstance(data, str):
                strings.append(literal(data))
            elif kind in ("string", "any"):
                strings.append(self.raw_value)
            if kind == "any":
                others.append(self.schemas.any_but_string())
            elif kind != "string" and not (kind == "literal" and isinstance(data, str)):
                others.append(self.schemas.choice_values([(kind, data)], root, where))
        close = literal(d.parameter_close())
        options = []
        if strings:
            options.append(
                f"{literal(d.parameter_open(key, True))} {alternatives(strings)} {close}"
            )
        if others:
            options.append(
                f"{literal(d.parameter_open(key, False))} {alternatives(others)} {close}"
            )
        return self.rules.define(name, " | ".join(options))
