"""Reading a JSON request field by field, with errors that name the field.

A :class:`Field` is a value plus its path in the request (``messages[3].content[1]``).
Every accessor either returns the value with the expected JSON type or raises
:class:`~dsmlkit.errors.InvalidRequest` (400) naming that path. It is the one reader of
requests: the canonical form (:mod:`dsmlkit.conversation.readers`) and every API reader
(:mod:`dsmlkit.api`) read with it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from dsmlkit.errors import InvalidRequest


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


class Field:
    """A JSON value found at ``path`` (``MISSING`` when the key was absent).

    Treat it as read-only (a plain class: readers make one per field they look at, and a
    frozen dataclass initialises several times slower). A member's path is written only
    when asked for (an error, a message's ``param``).
    """

    __slots__ = ("_at", "value")

    def __init__(self, value: Any, path: str) -> None:
        self.value = value
        self._at: str | tuple[Field, str | int] = path

    def __repr__(self) -> str:
        return f"Field({self.value!r}, {self.path!r})"

    @property
    def path(self) -> str:
        """Where the field is in the request (``messages[3].content[1]``; the body: "")."""
        at = self._at
        if isinstance(at, str):
            return at
        parent, key = at  # a member or an item: its path is written when first asked for
        above = parent.path
        path = f"{above}[{key}]" if isinstance(key, int) else f"{above}.{key}" if above else key
        self._at = path
        return path

    def __getitem__(self, key: str) -> Field:
        """The member ``key`` of this object (``MISSING`` when absent)."""
        value = self.value
        if value.__class__ is not dict:  # JSON gives dicts: the usual case checks nothing more
            value = self.object()
        return _member(self, value.get(key, MISSING), key)

    @property
    def present(self) -> bool:
        """Whether the field was given with a non-null value."""
        return self.value is not MISSING and self.value is not None

    def error(self, message: str) -> InvalidRequest:
        """A 400 error about this field."""
        return InvalidRequest(message, self.path or None)

    def _expect(self, kind: type | tuple[type, ...], what: str) -> Any:
        if self.value is MISSING:
            raise self.error(f"is required; give {what}")
        if not isinstance(self.value, kind) or (
            isinstance(self.value, bool) and bool not in _as_tuple(kind)
        ):
            raise self.error(f"must be {what}, got {_json_type(self.value)}")
        return self.value

    def object(self) -> Mapping[str, Any]:
        value: Mapping[str, Any] = self._expect(Mapping, "an object")
        return value

    def array(self) -> list[Field]:
        items: list[Any] = self._expect(list, "an array")
        return [_member(self, item, i) for i, item in enumerate(items)]

    def string(self) -> str:
        value: str = self._expect(str, "a string")
        return value

    def nonempty_string(self) -> str:
        value = self.string()
        if not value:
            raise self.error("must not be empty")
        return value

    def boolean(self) -> bool:
        value: bool = self._expect(bool, "true or false")
        return value

    def integer(self, minimum: int | None = None) -> int:
        value: int = self._expect(int, "an integer")
        if minimum is not None and value < minimum:
            raise self.error(f"must be at least {minimum}, got {value}")
        return value

    def number(self) -> float | int:
        value: float | int = self._expect((int, float), "a number")
        return value

    def choice(self, allowed: Collection[str]) -> str:
        value = self.string()
        if value not in allowed:
            raise self.error(f"must be one of {', '.join(sorted(allowed))}; got {value!r}")
        return value

    def optional_string(self) -> str | None:
        """A string or nothing (absent or null: None); the canonical form's wording."""
        if not self.present:
            return None
        if not isinstance(self.value, str):
            raise self.error("expected a string")
        return self.value

    def flag(self) -> bool:
        """True or false (absent or null: false); the canonical form's wording."""
        if not self.present:
            return False
        if not isinstance(self.value, bool):
            raise self.error("expected true or false")
        return self.value

    def type_tag(self) -> str:
        """The ``type`` member of an object (a content part or block)."""
        return self["type"].nonempty_string()


_new_field = object.__new__


def _member(parent: Field, value: Any, key: str | int) -> Field:
    """The field at ``key`` of ``parent``; its path is written when first asked for."""
    member: Field = _new_field(Field)  # no __init__, no path text yet
    member.value = value
    member._at = (parent, key)
    return member


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
