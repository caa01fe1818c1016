"""The ``vllm.general_plugins`` entry point: dsmlkit's parser names, registered lazily.

vLLM calls :func:`register` in every process it starts; it imports only vLLM's two
parser registries, and the parser classes (:mod:`dsmlkit.integrations.vllm_plugin`) load
when a server first looks one of the names up.
"""

from __future__ import annotations

from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager

from dsmlkit.integrations.engine_names import PARSER_DIALECTS

_MODULE = "dsmlkit.integrations.vllm_plugin"


def class_suffix(dialect: str) -> str:
    """``v4.1`` -> ``V41``: the part of the parser class names that names the dialect."""
    return "V" + dialect[1:].replace(".", "")


def register() -> None:
    """Register ``dsmlkit_v32``, ``dsmlkit_v4``, ``dsmlkit_v41`` (safe to call again)."""
    for name, dialect in PARSER_DIALECTS.items():
        suffix = class_suffix(dialect)
        ToolParserManager.register_lazy_module(name, _MODULE, f"Dsmlkit{suffix}ToolParser")
        ReasoningParserManager.register_lazy_module(
            name, _MODULE, f"Dsmlkit{suffix}ReasoningParser"
        )
