"""DSML grammars for constrained decoding (xgrammar EBNF and structural tags).

:func:`ebnf` gives the grammar of everything a DeepSeek model writes for one request (up
to, not including, the end-of-sentence token, which the engine adds when the grammar may
end): reasoning up to ``</think>`` in thinking mode, content, and the tool-call block in the
dialect's exact markup, with the tool names, parameter names, ``string="true"`` exactly for
string values and JSON-schema values for the others. :func:`structural_tag` wraps the same
grammar as an xgrammar structural tag. Both import only the standard library.

``tool_choice``: ``"auto"`` (text, then at most one block), ``"required"`` (text, then one
block), ``"none"`` (text only, no DSML markup) or a tool's name (text, then a block with one
call of that tool). ``parallel=False`` allows one call per block. See docs/grammar.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dsmlkit.dialects import Dialect
from dsmlkit.grammar.dsml import TOOL_CHOICES, ebnf

__all__ = ["TOOL_CHOICES", "ebnf", "structural_tag"]


def structural_tag(
    dialect: str | Dialect,
    tools: Iterable[Any],
    *,
    tool_choice: str = "auto",
    thinking: bool = False,
    parallel: bool = True,
) -> dict[str, Any]:
    """The grammar as an xgrammar structural tag (a JSON-able dict).

    ``{"type": "structural_tag", "format": {"type": "grammar", "grammar": <ebnf>}}``; pass
    ``json.dumps`` of it as the request's structural tag. Arguments as for :func:`ebnf`.
    """
    grammar = ebnf(dialect, tools, tool_choice=tool_choice, thinking=thinking, parallel=parallel)
    return {"type": "structural_tag", "format": {"type": "grammar", "grammar": grammar}}
