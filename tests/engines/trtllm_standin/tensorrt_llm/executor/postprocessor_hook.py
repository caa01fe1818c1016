"""Stand-in: the ``--post_processor_hook`` interface. The hook class is given by import
path, built with no arguments once in each process that post-processes output (each
postprocess worker, when ``--num_postprocess_workers`` > 0), and called per chunk; it
returns a verdict such as ``emit(text)``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PostProcessorHookChunk:
    request_id: int
    output_index: int
    text_diff: str
    text: str
    is_final: bool


@dataclass
class PostProcessorHookVerdict:
    action: str
    text: str = ""


def emit(text: str) -> PostProcessorHookVerdict:
    return PostProcessorHookVerdict("emit", text)
