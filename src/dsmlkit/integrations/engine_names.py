"""The parser names dsmlkit registers in the engines, and the classes behind them.

Everything here follows from :data:`dsmlkit.dialects.DIALECTS`: each dialect gets one
parser name (``v4.1`` → ``dsmlkit_v41``) and, in each engine plugin, one subclass of the
plugin's parser class per kind (``DsmlkitV41ToolParser``…) that only sets ``dialect``. A
new dialect needs no code in the plugins.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from dsmlkit.dialects import DIALECTS

T = TypeVar("T")


def class_suffix(dialect: str) -> str:
    """``v4.1`` -> ``V41``: the part of the parser class names that names the dialect."""
    return "V" + dialect[1:].replace(".", "")


def class_name(dialect: str, kind: str) -> str:
    """``("v4.1", "ToolParser")`` -> ``DsmlkitV41ToolParser``."""
    return f"Dsmlkit{class_suffix(dialect)}{kind}"


#: ``--tool-call-parser`` / ``--reasoning-parser`` name -> dsmlkit dialect.
PARSER_DIALECTS: Final = {f"dsmlkit_{class_suffix(name).lower()}": name for name in DIALECTS}


def dialect_classes(base: type[T], kind: str, namespace: dict[str, Any]) -> dict[str, type[T]]:
    """One subclass of ``base`` per dialect, by parser name: :func:`class_name` named, with
    ``dialect`` set, and bound in ``namespace`` (a plugin module's ``globals()``), which is
    where the engines look the classes up by name and where pickling finds them."""
    classes: dict[str, type[T]] = {}
    for parser_name, dialect in PARSER_DIALECTS.items():
        name = class_name(dialect, kind)
        attributes = {"dialect": dialect, "__module__": namespace["__name__"], "__qualname__": name}
        classes[parser_name] = namespace[name] = type(name, (base,), attributes)
    return classes
