"""The prompt renderer: conversations into DeepSeek V3.2 / V4 / V4.1 prompts, byte-exact.

>>> from dsmlkit.render import render
>>> result = render([{"role": "user", "content": "Hi"}], dialect="v4", mode="chat")
>>> result.prompt
'<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>'
>>> result.output_starts_in
'content'
"""

from dsmlkit.dialects import EffortTable
from dsmlkit.render.cache import RenderCache
from dsmlkit.render.renderer import (
    MODES,
    TOOL_REFERENCE_MODES,
    RenderOptions,
    RenderResult,
    render,
    render_conversation,
    resolve_dialect,
    thinking_of,
)

__all__ = [
    "MODES",
    "TOOL_REFERENCE_MODES",
    "EffortTable",
    "RenderCache",
    "RenderOptions",
    "RenderResult",
    "render",
    "render_conversation",
    "resolve_dialect",
    "thinking_of",
]
