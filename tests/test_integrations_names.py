"""The engine plugins' parser names and classes follow from DIALECTS alone."""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any

import pytest

from dsmlkit.dialects import DIALECTS
from dsmlkit.integrations.engine_names import (
    PARSER_DIALECTS,
    class_name,
    class_suffix,
    dialect_classes,
)


def test_every_dialect_has_a_parser_name() -> None:
    assert PARSER_DIALECTS == {"dsmlkit_v32": "v3.2", "dsmlkit_v4": "v4", "dsmlkit_v41": "v4.1"}
    assert sorted(PARSER_DIALECTS.values()) == sorted(DIALECTS)


@pytest.mark.parametrize(
    ("dialect", "kind", "expected"),
    [("v4.1", "ToolParser", "DsmlkitV41ToolParser"), ("v3.2", "Detector", "DsmlkitV32Detector")],
)
def test_class_names(dialect: str, kind: str, expected: str) -> None:
    assert class_name(dialect, kind) == expected
    assert class_suffix(dialect) == expected[len("Dsmlkit") :][: -len(kind)]


class _Base:
    dialect = "unset"


#: A module of its own, as a plugin module would be, so pickling looks the classes up there.
_MODULE = types.ModuleType("tests.fake_plugin_module")
sys.modules[_MODULE.__name__] = _MODULE


def test_dialect_classes_are_bound_in_the_module_by_name() -> None:
    namespace: dict[str, Any] = _MODULE.__dict__
    classes = dialect_classes(_Base, "Widget", namespace)
    assert list(classes) == list(PARSER_DIALECTS)
    for parser_name, cls in classes.items():
        dialect = PARSER_DIALECTS[parser_name]
        assert issubclass(cls, _Base)
        assert cls.dialect == dialect
        assert cls.__name__ == cls.__qualname__ == class_name(dialect, "Widget")
        assert namespace[cls.__name__] is cls
        assert cls.__module__ == _MODULE.__name__
        assert pickle.loads(pickle.dumps(cls)) is cls
        restored = pickle.loads(pickle.dumps(cls()))
        assert type(restored) is cls
