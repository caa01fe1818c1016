"""The prompt renderer: conversations into DeepSeek V3.2 / V4 / V4.1 prompts, byte-exact.

>>> from dsmlkit.render import render
>>> result = render([{"role": "user", "content": "Hi"}], dialect="v4", mode="chat")
>>> result.prompt
'<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>'
>>> result.output_starts_in
'content'
"""

from dsmlkit.render.effort import EFFORT_TABLES, EffortTable
from dsmlkit.render.renderer import MODES, TOOL_REFERENCE_MODES, RenderResult, render

__all__ = [
    "EFFORT_TABLES",
    "MODES",
    "TOOL_REFERENCE_MODES",
    "EffortTable",
    "RenderResult",
    "render",
]
