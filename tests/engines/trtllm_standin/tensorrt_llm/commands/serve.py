"""Stand-in: ``trtllm-serve``'s click command line, reduced to the parser options.

As in TensorRT-LLM, ``--tool_parser`` is ``click.Choice(ToolParserFactory.parsers.keys())``
and ``--reasoning_parser`` ``click.Choice(ReasoningParserFactory.keys())``, both evaluated
when this module is imported (click >= 8.2 copies the choices into a tuple there), and
``main`` is a group that runs ``serve`` when the first argument is not a subcommand. Instead
of starting a server, ``serve`` prints the parser classes the server would build, as JSON.
"""

from __future__ import annotations

import json
from typing import Any

import click

from tensorrt_llm.llmapi.reasoning_parser import ReasoningParserFactory
from tensorrt_llm.serve.tool_parser import ToolParserFactory


@click.command("serve")
@click.argument("model", type=str)
@click.option("--reasoning_parser", type=click.Choice(ReasoningParserFactory.keys()), default=None)
@click.option("--tool_parser", type=click.Choice(ToolParserFactory.parsers.keys()), default=None)
@click.option("--num_postprocess_workers", type=int, default=0)
@click.option("--post_processor_hook", type=str, default=None)
def serve(
    model: str,
    reasoning_parser: str | None,
    tool_parser: str | None,
    num_postprocess_workers: int,
    post_processor_hook: str | None,
) -> None:
    built: dict[str, Any] = {"model": model}
    if tool_parser is not None:
        built["tool_parser"] = type(ToolParserFactory.create_tool_parser(tool_parser)).__name__
    if reasoning_parser is not None:
        parser = ReasoningParserFactory.create_reasoning_parser(reasoning_parser)
        built["reasoning_parser"] = type(parser).__name__
    click.echo(json.dumps(built))


class DefaultGroup(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands:
            return "serve", self.commands["serve"], args
        return super().resolve_command(ctx, args)


main = DefaultGroup(commands={"serve": serve})

if __name__ == "__main__":
    main()
