"""DeepSeek DSML dialects as data.

The three dialects differ only in how the block, invoke and parameter tags are spelled
(and, for rendering, in a few template constants that live in :mod:`dsmlkit.render`).
A :class:`Dialect` is a frozen record; nothing subclasses it.

==========  ===================  ============  ==============  =========================
dialect     block                invoke        parameter       example opener
==========  ===================  ============  ==============  =========================
``v3.2``    ``function_calls``   ``invoke``    ``parameter``   ``<｜DSML｜function_calls>``
``v4``      ``tool_calls``       ``invoke``    ``parameter``   ``<｜DSML｜tool_calls>``
``v4.1``    `` calls``           `` invoke``   `` parameter``  ``<｜DSML｜ calls>``
==========  ===================  ============  ==============  =========================

In V4.1 the leading space is part of every tag name, open and close.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The DSML marker as the tokenizer writes it (U+FF5C on both sides).
MARKER = "｜DSML｜"
#: The legacy ASCII spelling some deployments and fine-tunes emit.
ASCII_MARKER = "|DSML|"

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Dialect:
    """Spellings of one DeepSeek DSML dialect."""

    name: str
    block: str
    invoke: str
    parameter: str

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


V3_2 = Dialect(name="v3.2", block="function_calls", invoke="invoke", parameter="parameter")
V4 = Dialect(name="v4", block="tool_calls", invoke="invoke", parameter="parameter")
V4_1 = Dialect(name="v4.1", block=" calls", invoke=" invoke", parameter=" parameter")

DIALECTS: dict[str, Dialect] = {d.name: d for d in (V3_2, V4, V4_1)}
DEFAULT_DIALECT = V4_1

#: Block names seen in the field that are typos of a real one (recovered, with a diagnostic).
TYPO_BLOCK_NAMES = ("toolcalls",)


def get_dialect(name: str | Dialect) -> Dialect:
    """Look a dialect up by name (``v3.2``, ``v4``, ``v4.1``; ``v32``/``v41`` also work)."""
    if isinstance(name, Dialect):
        return name
    key = name.strip().lower()
    key = {"v32": "v3.2", "v41": "v4.1", "3.2": "v3.2", "4": "v4", "4.1": "v4.1"}.get(key, key)
    try:
        return DIALECTS[key]
    except KeyError:
        known = ", ".join(DIALECTS)
        raise ValueError(f"unknown dialect {name!r}; use one of: {known}") from None
