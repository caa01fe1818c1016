"""The ``vllm.general_plugins`` entry point: dsmlkit's parser names, registered lazily.

vLLM calls :func:`register` in every process it starts; it imports only vLLM's two
parser registries, and the parser classes (:mod:`dsmlkit.integrations.vllm_plugin`) load
when a server first looks one of the names up.
"""

from __future__ import annotations

from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager

from dsmlkit.integrations.engine_names import PARSER_DIALECTS, class_name

_MODULE = "dsmlkit.integrations.vllm_plugin"


def register() -> None:
    """Register one parser name per dialect, ``dsmlkit_v41`` and so on (safe to call again)."""
    for name, dialect in PARSER_DIALECTS.items():
        ToolParserManager.register_lazy_module(name, _MODULE, class_name(dialect, "ToolParser"))
        ReasoningParserManager.register_lazy_module(
            name, _MODULE, class_name(dialect, "ReasoningParser")
        )
