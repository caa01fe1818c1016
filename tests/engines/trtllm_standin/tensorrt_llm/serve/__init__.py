"""Stand-in: ``tensorrt_llm.serve`` (see the package docstring)."""
