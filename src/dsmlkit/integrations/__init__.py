"""dsmlkit inside serving engines: vLLM and SGLang plugins.

Nothing here is imported by dsmlkit's core. ``dsmlkit.integrations.vllm_plugin`` imports
vLLM and ``dsmlkit.integrations.sglang_plugin`` imports SGLang; both load only when the
engine loads them (vLLM through the ``vllm.general_plugins`` entry point). The shared
pieces (:mod:`~dsmlkit.integrations.split`, :mod:`~dsmlkit.integrations.engine_names`)
import only the standard library and dsmlkit.
"""

#: Nothing to import from the package itself: each integration is its own module, loaded by
#: its engine (or by LiteLLM's ``callbacks`` setting) by name.
__all__: list[str] = []
