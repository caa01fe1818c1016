"""What every route shares: the settings, the tokenizer, the metrics, the upstream client."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from starlette.requests import Request

from dsmlkit.errors import ApiError
from dsmlkit.render.tokens import PromptTokenizer, TokenizerNotInstalled, load_tokenizer
from dsmlkit.server.config import NO_TOKENIZER, ServerConfig
from dsmlkit.server.metrics import Metrics
from dsmlkit.server.reasoning_store import ReasoningMemory, ThinkingSigner
from dsmlkit.server.reqlog import RequestRecord
from dsmlkit.server.state_store import open_store
from dsmlkit.server.upstream import UpstreamClient


def load_prompt_tokenizer(setting: str | None) -> tuple[PromptTokenizer | None, str]:
    """The tokenizer ``--tokenizer`` asks for, and a line saying what was loaded.

    No setting means the bundled V4 tokenizer if the ``[tokenizer]`` extra is installed,
    else none (token ids are then omitted); an explicit path that fails raises.
    """
    if setting == NO_TOKENIZER:
        return None, "none (--tokenizer none): token ids are omitted, prompts go upstream as text"
    try:
        tokenizer = load_tokenizer(setting)
    except TokenizerNotInstalled as exc:
        if setting is not None:
            raise
        return None, f"none ({exc}): token ids are omitted, prompts go upstream as text"
    return tokenizer, f"{tokenizer.name} ({tokenizer.source})"


@dataclass
class ServerState:
    """Shared by all requests of one app (lives in ``app.state.dsmlkit``)."""

    config: ServerConfig
    tokenizer: PromptTokenizer | None
    tokenizer_description: str
    upstream_transport: httpx.AsyncBaseTransport | None = None
    metrics: Metrics = field(default_factory=Metrics)
    started: int = field(default_factory=lambda: int(time.time()))
    _upstream: UpstreamClient | None = None
    #: The reasoning round trip, on the ``--state`` store (opened with the state).
    reasoning: ReasoningMemory = field(init=False)

    #: Seals the reasoning of Responses answers (``encrypted_content``): the same server
    #: secret that signs Anthropic thinking blocks.
    seal_key: bytes = field(init=False)

    def __post_init__(self) -> None:
        store = open_store(self.config.state)
        secret = self.config.state_secret or secrets.token_hex(32)
        self.reasoning = ReasoningMemory(store, ThinkingSigner(secret))
        self.seal_key = secret.encode()

    def upstream(self) -> UpstreamClient:
        """The upstream client (made on first use); a 404 when no upstream is configured."""
        endpoint = self.config.upstream_endpoint
        if endpoint is None:
            raise ApiError.for_status(
                404,
                "this server has no upstream engine, so it only renders, tokenizes and "
                "parses; start it with --upstream URL to serve completions",
            )
        if self._upstream is None:
            self._upstream = UpstreamClient(
                endpoint,
                read_timeout=self.config.upstream_timeout,
                connect_timeout=self.config.connect_timeout,
                transport=self.upstream_transport,
            )
        return self._upstream

    def require_tokenizer(self) -> PromptTokenizer:
        """The loaded tokenizer; a 501 saying how to get one when there is none."""
        if self.tokenizer is None:
            raise ApiError.for_status(
                501,
                "no tokenizer is loaded: install dsmlkit[tokenizer] for the bundled DeepSeek "
                "tokenizer or start the server with --tokenizer PATH",
            )
        return self.tokenizer

    async def aclose(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None
        await self.reasoning.store.aclose()


def client_keys(headers: Mapping[str, str]) -> list[str]:
    """The API keys a client offers: ``Authorization: Bearer KEY``, then ``x-api-key``."""
    keys = []
    authorization = headers.get("authorization", "")
    if authorization[:7].lower() == "bearer ":
        keys.append(authorization[7:].strip())
    keys.append(headers.get("x-api-key", "").strip())
    return [key for key in keys if key]


def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.dsmlkit
    return state


def record_of(request: Request) -> RequestRecord:
    record: RequestRecord = request.state.record
    return record
