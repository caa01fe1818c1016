"""Stand-in: ``tensorrt_llm.commands`` (see the package docstring)."""
