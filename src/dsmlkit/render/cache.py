"""What a caller keeps between requests so that a resent history is not done again.

An agent sends its whole history with every request. A :class:`RenderCache` keeps the
messages the canonical reader read (by everything they were read from) and the calls
blocks the renderer wrote (by tool names and arguments texts). The caller makes one and
passes it in (the server keeps one per process); without one nothing is kept. What it
holds reads and writes exactly as a fresh read and render would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsmlkit.conversation.model import Message


class RenderCache:
    """Messages read and calls blocks written before, each bounded; when full, it starts
    again.

    ``message_chars`` bounds the characters the messages' keys hold (8 million: some tens
    of MB); ``blocks`` the number of calls blocks, ``block_chars`` the arguments texts of
    one block kept (longer ones are never kept). Messages are read-only, so requests (and
    threads) can share them.
    """

    def __init__(
        self, message_chars: int = 8_000_000, blocks: int = 4096, block_chars: int = 8192
    ) -> None:
        self.message_chars = message_chars
        self.blocks = blocks
        self.block_chars = block_chars
        self._messages: dict[tuple[Any, ...], Message] = {}
        self._kept_chars = 0
        self._blocks: dict[tuple[Any, ...], str] = {}

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(messages kept, characters their keys hold, calls blocks kept)."""
        return len(self._messages), self._kept_chars, len(self._blocks)

    def message(self, key: tuple[Any, ...]) -> Message | None:
        """The message read from ``key`` before, if kept."""
        return self._messages.get(key)

    def keep_message(self, key: tuple[Any, ...], chars: int, message: Message) -> None:
        """Keep ``message`` read from ``key``, which holds ``chars`` characters."""
        if self._kept_chars + chars > self.message_chars:
            self._messages.clear()
            self._kept_chars = 0
            if chars > self.message_chars:
                return
        self._messages[key] = message
        self._kept_chars += chars

    def block(self, key: tuple[Any, ...]) -> str | None:
        """The calls block written for ``key`` before, if kept."""
        return self._blocks.get(key)

    def keep_block(self, key: tuple[Any, ...], chars: int, block: str) -> None:
        """Keep ``block``, written from ``key`` whose arguments texts hold ``chars``."""
        if chars > self.block_chars or self.blocks < 1:
            return
        if len(self._blocks) >= self.blocks:
            self._blocks.clear()
        self._blocks[key] = block

    def clear(self) -> None:
        """Forget everything kept."""
        self._messages.clear()
        self._kept_chars = 0
        self._blocks.clear()
