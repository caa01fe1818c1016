"""Stand-in: reasoning parsers, registered by the public ``register_reasoning_parser``
decorator into ``ReasoningParserFactory``'s table, looked up lower-cased and built with
the request's ``chat_template_kwargs`` plus the keyword defaults given at registration."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, KeysView
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass
class ReasoningParserResult:
    content: str = ""
    reasoning_content: str = ""


class BaseReasoningParser(ABC):
    needs_raw_special_tokens: bool = False
    resolves_thinking_from_prompt: ClassVar[bool] = False

    def __init__(  # noqa: B027 (a no-op hook subclasses call, as in TRT-LLM)
        self, *, chat_template_kwargs: dict[str, Any] | None = None
    ) -> None:
        pass

    @abstractmethod
    def parse(self, text: str) -> ReasoningParserResult: ...

    @abstractmethod
    def parse_delta(self, delta_text: str) -> ReasoningParserResult: ...

    def finish(self) -> ReasoningParserResult:
        return ReasoningParserResult()


def register_reasoning_parser(
    *keys: str, **default_kwargs: Any
) -> Callable[[type[BaseReasoningParser]], type[BaseReasoningParser]]:
    def decorator(parser: type[BaseReasoningParser]) -> type[BaseReasoningParser]:
        for key in keys:
            ReasoningParserFactory._parsers[key] = (parser, default_kwargs)
        return parser

    return decorator


class ReasoningParserFactory:
    _parsers: ClassVar[dict[str, tuple[type[BaseReasoningParser], dict[str, Any]]]] = {}

    @classmethod
    def create_reasoning_parser(
        cls, reasoning_parser: str, chat_template_kwargs: dict[str, Any] | None = None
    ) -> BaseReasoningParser:
        try:
            parser, defaults = cls._parsers[reasoning_parser.lower()]
        except KeyError as e:
            raise ValueError(
                f"Invalid reasoning parser: {reasoning_parser}\n"
                f"Supported parsers: {list(cls._parsers)}"
            ) from e
        return parser(chat_template_kwargs=chat_template_kwargs, **defaults)

    @classmethod
    def keys(cls) -> KeysView[str]:
        return cls._parsers.keys()
