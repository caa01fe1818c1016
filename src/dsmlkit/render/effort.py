"""Reasoning-effort tables: what each checkpoint puts before the first message.

Checkpoints of one dialect disagree on the effort texts (V4 preview vs 0731) and budgets
(V4.1 pre-release drop vs HF release), so the table is an option. ``medium``, which the
reference encoders lack but OpenAI clients send, means the table's default level, and
``xhigh`` means ``high`` where the checkpoint has no such level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dsmlkit.errors import InvalidRequest
from dsmlkit.render.templates import (
    EFFORT_ABSOLUTE_MAXIMUM,
    EFFORT_BEYOND_MAXIMUM,
    EFFORT_BUDGET_LINE,
)

BUDGET_RANGE = range(1, 101)


@dataclass(frozen=True)
class EffortTable:
    """One checkpoint's reasoning-effort levels.

    ``prefixes`` maps each level name to the text rendered at the start of the first
    message in thinking mode. ``budgets`` (V4.1 only) maps level names to their integer
    budget; a table with budgets also accepts any integer from 1 to 100.
    """

    name: str
    description: str
    prefixes: Mapping[str, str]
    default: str
    budgets: Mapping[str, int] | None = None

    def prefix(self, effort: str | int | None) -> str:
        """The text for ``effort`` (None = the default level); raises for unknown values."""
        if effort is None:
            return self.prefixes[self.default]
        if isinstance(effort, str) and effort.isdecimal():
            effort = int(effort)
        if isinstance(effort, int) and not isinstance(effort, bool):
            if self.budgets is None:
                raise InvalidRequest(
                    f"integer reasoning effort {effort} needs the v4.1 dialect; "
                    f"use one of: {', '.join(self.prefixes)}",
                    "reasoning_effort",
                )
            if effort not in BUDGET_RANGE:
                raise InvalidRequest(
                    f"reasoning effort {effort} is out of range; use an integer from 1 to 100 "
                    f"or one of: {', '.join(self.prefixes)}",
                    "reasoning_effort",
                )
            return EFFORT_BUDGET_LINE.format(budget=effort)
        if isinstance(effort, str) and effort in self.prefixes:
            return self.prefixes[effort]
        hint = " (for no reasoning use mode='chat')" if effort == "none" else ""
        integers = " or an integer from 1 to 100" if self.budgets is not None else ""
        raise InvalidRequest(
            f"unknown reasoning effort {effort!r} for the {self.name!r} table; "
            f"use one of: {', '.join(self.prefixes)}{integers}{hint}",
            "reasoning_effort",
        )


def _budget_table(name: str, description: str, budgets: dict[str, int]) -> EffortTable:
    prefixes = {level: EFFORT_BUDGET_LINE.format(budget=value) for level, value in budgets.items()}
    return EffortTable(
        name,
        description,
        MappingProxyType(prefixes),
        default="high",
        budgets=MappingProxyType(budgets),
    )


_V4_PREVIEW = EffortTable(
    "preview",
    "V4-Flash / V4-Pro preview encoder: only max adds a text",
    MappingProxyType(
        {"low": "", "medium": "", "high": "", "xhigh": "", "max": EFFORT_ABSOLUTE_MAXIMUM}
    ),
    default="high",
)
_V4_0731 = EffortTable(
    "0731",
    "V4-Flash-0731 / Vision-Exp encoder: high and max add texts, low is the default",
    MappingProxyType(
        {
            "low": "",
            "medium": "",
            "high": EFFORT_ABSOLUTE_MAXIMUM,
            "xhigh": EFFORT_ABSOLUTE_MAXIMUM,
            "max": EFFORT_BEYOND_MAXIMUM,
        }
    ),
    default="low",
)
_V41_RELEASE = _budget_table(
    "release",
    "V4.1-Flash HF release encoder: low 50, high 75, max 100, default 75",
    {"low": 50, "medium": 75, "high": 75, "xhigh": 75, "max": 100},
)
_V41_PREVIEW = _budget_table(
    "preview",
    "V4.1 pre-release encoder drop (vLLM/SGLang copies): low 25, high 50, xhigh 75, max 100, "
    "default 50",
    {"low": 25, "medium": 50, "high": 50, "xhigh": 75, "max": 100},
)

#: Effort tables by dialect, then by table name; the first table of a dialect is its default.
EFFORT_TABLES: Mapping[str, Mapping[str, EffortTable]] = MappingProxyType(
    {
        "v3.2": MappingProxyType({}),
        "v4": MappingProxyType({t.name: t for t in (_V4_PREVIEW, _V4_0731)}),
        "v4.1": MappingProxyType({t.name: t for t in (_V41_RELEASE, _V41_PREVIEW)}),
    }
)


def effort_table(dialect: str, name: str | None) -> EffortTable | None:
    """The named table of ``dialect`` (None = its default); None when it has no effort."""
    tables = EFFORT_TABLES[dialect]
    if not tables:
        if name is not None:
            raise InvalidRequest(f"{dialect} has no reasoning-effort tables", "effort_table")
        return None
    if name is None:
        return next(iter(tables.values()))
    try:
        return tables[name]
    except KeyError:
        raise InvalidRequest(
            f"unknown effort table {name!r} for {dialect}; use one of: {', '.join(tables)}",
            "effort_table",
        ) from None
