"""Stand-in: ``tensorrt_llm.executor`` (see the package docstring)."""
