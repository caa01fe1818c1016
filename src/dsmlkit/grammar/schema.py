"""JSON schemas as EBNF: the values a ``string="false"`` parameter may hold.

Supported: ``type`` (one or a list), ``enum``, ``const``, ``anyOf``/``oneOf`` (either
branch), ``allOf`` (merged), ``$ref`` into ``$defs``/``definitions`` (recursion included),
``properties``/``required``/``additionalProperties`` (absent means no extra keys, as in
xgrammar's strict mode), ``items``/``prefixItems``, ``minItems``/``maxItems`` and
``nullable``. Keys are written in ``properties`` order. Keywords that bound a value
(``minimum``, ``pattern``, ``format``, ``minLength`` …) are not enforced; annotations
(``description``, ``title``, ``default`` …) are ignored. JSON is written the way
``json.dumps`` does, with or without the space after ``,`` and ``:``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsmlkit.errors import CallerError
from dsmlkit.grammar.ebnf import RuleSet, alternatives, joined, literal
from dsmlkit.grammar.guard import Alphabet, Pattern, guarded_text

_TYPES = ("string", "number", "integer", "boolean", "null", "array", "object")
_SCALARS = {
    "integer": "json_integer",
    "number": "json_number",
    "boolean": '("true" | "false")',
    "null": '"null"',
}
_SEPARATOR = '"," " "?'
_JSON_STRING = Alphabet(
    forbidden=frozenset('"\\') | frozenset(map(chr, range(0x20))),
    neutral='"\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
)
_COLON = '":" " "?'
#: A choice is one branch of a schema: ("literal", value), ("any", None) or (type, schema).
Choice = tuple[str, Any]


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


class SchemaRules:
    """Turns the JSON schemas of one tool set into rules, sharing rules between equal schemas.

    JSON strings never hold ``string_patterns``; ``where`` in the methods names the schema
    in error messages.
    """

    def __init__(self, rules: RuleSet, string_patterns: Sequence[Pattern]) -> None:
        self._rules = rules
        self._string_patterns = string_patterns
        self._by_schema: dict[str, str] = {}

    @property
    def _string(self) -> str:
        if "json_string" not in self._rules:
            content = guarded_text(self._rules, "json_chars", self._string_patterns, _JSON_STRING)
            self._rules.define("json_string", f'"\\"" {content} "\\""')
        return "json_string"

    # ------------------------------------------------------------------ choices

    def choices(
        self, schema: Any, root: Any, where: str, seen: frozenset[str] = frozenset()
    ) -> list[Choice]:
        """The branches of ``schema``, references and ``allOf`` resolved."""
        if schema is True:
            return [("any", None)]
        if schema is False:
            raise CallerError(f"{where}: the schema false admits no value; remove it")
        if not isinstance(schema, Mapping):
            raise CallerError(f"{where}: a schema must be an object, got {type(schema).__name__}")
        if "$ref" in schema:
            ref = schema["$ref"]
            if ref in seen:
                raise CallerError(f"{where}: {ref!r} refers to itself without a value in between")
            return self.choices(self._resolve(ref, root, where), root, where, seen | {ref})
        if "allOf" in schema:
            return self.choices(self._merge(schema, root, where), root, where, seen)
        if "const" in schema:
            return [("literal", schema["const"])]
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise CallerError(f"{where}: enum must be a non-empty list")
            return [("literal", value) for value in values]
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                branches = schema[keyword]
                if not isinstance(branches, list) or not branches:
                    raise CallerError(f"{where}: {keyword} must be a non-empty list")
                return [
                    choice
                    for i, branch in enumerate(branches)
                    for choice in self.choices(branch, root, f"{where}.{keyword}[{i}]", seen)
                ]
        types = schema.get("type", _inferred_type(schema))
        if types is None:
            return [("any", None)]
        type_list = [types] if isinstance(types, str) else types
        if not isinstance(type_list, list) or not type_list:
            raise CallerError(f"{where}: type must be a type name or a list of them")
        for name in type_list:
            if name not in _TYPES:
                known = ", ".join(_TYPES)
                raise CallerError(f"{where}: unknown type {name!r}; use one of: {known}")
        if schema.get("nullable") is True and "null" not in type_list:
            type_list = [*type_list, "null"]
        return [(name, schema) for name in type_list]

    def _resolve(self, ref: Any, root: Any, where: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise CallerError(f"{where}: only local references ('#/$defs/…') are supported")
        target = root
        for part in ref[1:].split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or key not in target:
                raise CallerError(f"{where}: reference {ref!r} points at nothing")
            target = target[key]
        return target

    def _merge(self, schema: Mapping[str, Any], root: Any, where: str) -> dict[str, Any]:
        parts = schema["allOf"]
        if not isinstance(parts, list):
            raise CallerError(f"{where}: allOf must be a list")
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for i, part in enumerate(parts):
            while isinstance(part, Mapping) and "$ref" in part:
                part = self._resolve(part["$ref"], root, f"{where}.allOf[{i}]")
            if not isinstance(part, Mapping):
                raise CallerError(f"{where}.allOf[{i}]: a schema must be an object")
            for key, value in part.items():
                if key == "properties" and isinstance(value, Mapping):
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = [*merged.get("required", []), *value]
                else:
                    merged[key] = value
        return merged

    # ------------------------------------------------------------------ JSON values

    def value(self, schema: Any, root: Any, where: str) -> str:
        """An expression for any JSON value ``schema`` admits."""
        return self.choice_values(self.choices(schema, root, where), root, where)

    def choice_values(self, choices: list[Choice], root: Any, where: str) -> str:
        """An expression for the JSON values of ``choices``."""
        return alternatives(self._choice(choice, root, where) for choice in choices)

    def _choice(self, choice: Choice, root: Any, where: str) -> str:
        kind, data = choice
        if kind == "literal":
            return literal(_dump(data))
        if kind == "any":
            return self._any()
        if kind == "string":
            return self._string
        if kind in _SCALARS:
            self._numbers()
            return _SCALARS[kind]
        key = kind + _dump({"schema": data, "root": root if _has_ref(data) else None})
        name = self._by_schema.get(key)
        if name is None:
            name = self._by_schema[key] = self._rules.reserve(f"json_{len(self._by_schema)}")
            body = (
                self._array(data, root, where)
                if kind == "array"
                else self._object(data, root, where, name)
            )
            self._rules.define(name, body)
        return name

    def _array(self, schema: Mapping[str, Any], root: Any, where: str) -> str:
        prefix_items = schema.get("prefixItems", [])
        if not isinstance(prefix_items, list):
            raise CallerError(f"{where}: prefixItems must be a list")
        fixed = [
            self.value(s, root, f"{where}.prefixItems[{i}]") for i, s in enumerate(prefix_items)
        ]
        items = schema.get("items", True)
        more = None if items is False else self.value(items, root, f"{where}.items")
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if not isinstance(low, int) or not (high is None or isinstance(high, int)):
            raise CallerError(f"{where}: minItems and maxItems must be integers")
        if fixed:  # the fixed items, then any number of the others
            body = f" {_SEPARATOR} ".join(fixed)
            if more is not None:
                body += f" ({_SEPARATOR} {more})*"
            return f'"[" {body} "]"' + (' | "[]"' if not low else "")
        if more is None or high == 0:
            return '"[]"'
        if high == 1:
            return f'"[" {more} "]"' + (' | "[]"' if not low else "")
        repeat = f"{{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
        body = f'"[" {more} ({_SEPARATOR} {more}){repeat} "]"'
        return body if low > 0 else f'{body} | "[]"'

    def _object(self, schema: Mapping[str, Any], root: Any, where: str, name: str) -> str:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, Mapping):
            raise CallerError(f"{where}: properties must be an object")
        check_required(required, properties, where)
        members = []
        for key, sub in properties.items():
            value = self.value(sub, root, f"{where}.properties.{key}")
            members.append((f"{literal(_dump(key))} {_COLON} {value}", key in required))
        extra = schema.get("additionalProperties", False)
        repeated = ""
        if extra is not False:
            value = self.value(extra, root, f"{where}.additionalProperties")
            repeated = f"{self._string} {_COLON} {value}"
        body = joined(self._rules, name, members, _SEPARATOR, repeated)
        return f'"{{" {body} "}}"'

    def _any(self) -> str:
        if "json_any" not in self._rules:
            self._rules.reserve("json_any")
            self._rules.define("json_any", f"{self._string} | {self.any_but_string()}")
        return "json_any"

    def any_but_string(self) -> str:
        """Any JSON value that is not a string (what ``string="false"`` holds for ``{}``)."""
        if "json_any_but_string" not in self._rules:
            self._numbers()
            self._rules.reserve("json_any_but_string")
            items = f"json_any ({_SEPARATOR} json_any)*"
            members = f"{self._string} {_COLON} json_any"
            self._rules.define(
                "json_any_but_string",
                f'"{{" ({members} ({_SEPARATOR} {members})*)? "}}" | "[" ({items})? "]"'
                ' | json_number | "true" | "false" | "null"',
            )
            self._any()
        return "json_any_but_string"

    def _numbers(self) -> None:
        if "json_integer" not in self._rules:
            self._rules.define("json_integer", '"-"? ("0" | [1-9] [0-9]*)')
            self._rules.define("json_number", 'json_integer ("." [0-9]+)? ([eE] [+\\-]? [0-9]+)?')


def check_required(required: Any, properties: Mapping[str, Any], where: str) -> None:
    """``required`` must list names that ``properties`` declares."""
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise CallerError(f"{where}: required must be a list of property names")
    for key in required:
        if key not in properties:
            raise CallerError(f"{where}: required property {key!r} is not in properties; add it")


def _inferred_type(schema: Mapping[str, Any]) -> str | None:
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    return None


def _has_ref(schema: Any) -> bool:
    return '"$ref"' in _dump(schema)
