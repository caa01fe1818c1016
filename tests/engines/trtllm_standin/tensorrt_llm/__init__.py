"""A stand-in for TensorRT-LLM's parser surface, written for dsmlkit's tests.

TensorRT-LLM cannot be installed here (PyPI's ``tensorrt-llm`` downloads from NVIDIA's
own index), so this package reproduces, from the signatures and behaviour documented in
TensorRT-LLM's public source (NVIDIA/TensorRT-LLM, ``tensorrt_llm/serve/tool_parser``,
``tensorrt_llm/llmapi/reasoning_parser.py``, ``tensorrt_llm/serve/postprocess_handlers.py``,
``tensorrt_llm/executor/postprocessor_hook.py``, ``tensorrt_llm/commands/serve.py``), the
part dsmlkit's adapter touches: the same module paths, class names, tables, lookups and
click options. It holds none of TensorRT-LLM's code and none of its own parsers; the
serve command prints the parsers it would build instead of starting a server.

Only the TRT-LLM tests put its folder on ``sys.path``.
"""
