"""The prompt renderer: conversations into DeepSeek V3.2 / V4 / V4.1 prompts, byte-exact.

>>> from dsmlkit.render import render
>>> result = render([{"role": "user", "content": "Hi"}], dialect="v4", mode="chat")
>>> result.prompt
'<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>'
>>> result.output_starts_in
'content'
"""

from dsmlkit.render.cache import RenderCache
from dsmlkit.render.renderer import RenderOptions, RenderResult, render, render_conversation

__all__ = ["RenderCache", "RenderOptions", "RenderResult", "render", "render_conversation"]
