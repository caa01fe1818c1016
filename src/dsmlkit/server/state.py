"""What every route shares: the settings, the served models, the metrics, the upstream client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from starlette.requests import Request

from dsmlkit.api.errors import ApiError
from dsmlkit.errors import install_hint
from dsmlkit.render import RenderCache
from dsmlkit.render.tokens import PromptTokenizer, TokenizerNotInstalled, load_tokenizer
from dsmlkit.server.config import NO_TOKENIZER, ModelConfig, ServerConfig
from dsmlkit.server.engine import EngineStatus, TokenPlan, read_engine
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.metrics import Metrics
from dsmlkit.server.reasoning_store import ReasoningMemory, ThinkingSigner
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import open_store
from dsmlkit.server.tracing import Tracing
from dsmlkit.server.upstream import UpstreamClient
from dsmlkit.server.upstream_kinds import UpstreamKind

LOGGER = logging.getLogger("dsmlkit.server")


def _load_prompt_tokenizer(setting: str | None) -> tuple[PromptTokenizer | None, str]:
    """The tokenizer ``--tokenizer`` asks for, and a line saying what was loaded.

    No setting means the bundled V4 tokenizer if the ``[tokenizer]`` extra is installed,
    else none (token ids are then omitted); an explicit path that fails raises.
    """
    if setting == NO_TOKENIZER:
        return None, "--tokenizer none"
    try:
        tokenizer = load_tokenizer(setting)
    except TokenizerNotInstalled as exc:
        if setting is not None:
            raise
        return None, str(exc)
    return tokenizer, f"{tokenizer.name} ({tokenizer.source})"


@dataclass
class ServedModel:
    """One model as the routes use it: its settings, tokenizer and what its engine said."""

    config: ModelConfig
    tokenizer: PromptTokenizer | None
    tokenizer_description: str
    engine: EngineStatus = field(default_factory=EngineStatus)
    plan: TokenPlan = field(init=False)

    def __post_init__(self) -> None:
        self.plan = TokenPlan.decide(self.tokenizer, self.tokenizer_description, None)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def dialect(self) -> str:
        return self.config.dialect

    @property
    def kind(self) -> UpstreamKind:
        return self.config.kind

    @property
    def engine_model(self) -> str | None:
        """The name sent upstream as ``model`` (None: chat mode forwards the client's)."""
        if self.config.upstream_model is not None:
            return self.config.upstream_model
        facts = self.engine.facts
        return self.kind.engine_model(facts.served if facts is not None else (), self.name)

    @property
    def max_model_len(self) -> int | None:
        facts = self.engine.facts
        return facts.max_model_len if facts is not None else None

    def require_tokenizer(self) -> PromptTokenizer:
        """The loaded tokenizer; a 501 saying how to get one when there is none."""
        if self.tokenizer is None:
            raise ApiError.for_status(
                501,
                "no tokenizer is loaded: start the server with --tokenizer PATH, or install the "
                f"tokenizer extra for the bundled DeepSeek tokenizer ({install_hint('tokenizer')})",
            )
        return self.tokenizer

    def name_mismatch(self) -> str | None:
        """Why the engine, as last read, does not serve the configured name (None: it does
        or it was not read)."""
        facts, wanted = self.engine.facts, self.config.upstream_model
        if facts is None or wanted is None or wanted in facts.served:
            return None
        return (
            f"the engine serves {', '.join(facts.served) or 'no model'}, not {wanted!r}: "
            "set upstream_model (--model) to the engine's --served-model-name"
        )

    def problems(self) -> list[str]:
        """What is wrong with the engine as last read (empty: ready)."""
        if self.config.upstream is None:
            return []
        if self.engine.error is not None:
            return [self.engine.error]
        if self.engine.facts is None:
            return ["the engine has not been read yet"]
        mismatch = self.name_mismatch()
        return [mismatch] if mismatch else []


@dataclass(eq=False)
class ServerState:
    """Shared by all requests of one app (lives in ``app.state.dsmlkit``)."""

    config: ServerConfig
    models: list[ServedModel]
    metrics: Metrics = field(default_factory=Metrics)
    #: OpenTelemetry, when an OTLP endpoint is set (made as the app starts serving).
    tracing: Tracing | None = None
    started: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    _streams: set[anyio.CancelScope] = field(default_factory=set)
    _upstream: UpstreamClient | None = None
    #: Messages read and calls blocks written for earlier requests (an agent resends its
    #: history): one per process, shared by every model and request.
    render_cache: RenderCache = field(default_factory=RenderCache)
    #: The reasoning round trip, on the ``--state`` store (opened with the state).
    reasoning: ReasoningMemory = field(init=False)
    #: Seals the reasoning of Responses answers (``encrypted_content``) and signs Anthropic
    #: thinking blocks: the key ring of ``DSMLKIT_STATE_SECRET`` (random when unset).
    keys: KeyRing = field(init=False)

    def __post_init__(self) -> None:
        store = open_store(self.config.state, max_bytes=self.config.state_max_bytes)
        self.keys = KeyRing.from_setting(self.config.state_secret)
        self.reasoning = ReasoningMemory(store, ThinkingSigner(self.keys))

    @classmethod
    def load(cls, config: ServerConfig) -> ServerState:
        """Load every model's tokenizer (a bad ``tokenizer`` setting raises here)."""
        models = [
            ServedModel(model, *_load_prompt_tokenizer(model.tokenizer))
            for model in config.model_configs
        ]
        return cls(config, models)

    @property
    def default(self) -> ServedModel:
        return self.models[0]

    def model_for(self, name: Any) -> ServedModel:
        """The model a request names; with a model list, an unknown name is a 404."""
        if not self.config.strict_routing:
            return self.default
        for model in self.models:
            if isinstance(name, str) and name in model.config.names:
                return model
        listed = ", ".join(n for m in self.models for n in m.config.names)
        raise ApiError.for_status(
            404, f"the model {name!r} is not served here; use one of: {listed}", "model"
        )

    def route(self, name: Any, headers: Mapping[str, str]) -> Route:
        """Where a gateway request naming the model ``name`` goes (a 404 for an unknown
        model or a server with no upstream), and with which key: the upstream's own if
        configured, else, on an open server, the client's (forwarded)."""
        model = self.model_for(name)
        endpoint = self.endpoint(model)
        if self.config.upstream_api_key is not None or self.config.api_key is not None:
            key: str | None = self.config.upstream_api_key
            forwarded = False
        else:
            offered = client_keys(headers)
            key, forwarded = (offered[0], True) if offered else (None, False)
        return Route(model, endpoint, self.upstream(), key, forwarded)

    def upstream(self) -> UpstreamClient:
        """The upstream client (made on first use, in the event loop that serves)."""
        if self._upstream is None:
            self._upstream = UpstreamClient(
                read_timeout=self.config.upstream_timeout,
                connect_timeout=self.config.connect_timeout,
                deadline=self.config.upstream_deadline,
                max_line=self.config.upstream_max_line_bytes,
            )
        return self._upstream

    def endpoint(self, model: ServedModel) -> str:
        """Where ``model``'s completions go; a 404 when it has no upstream."""
        endpoint = model.config.upstream_endpoint
        if endpoint is None:
            raise ApiError.for_status(
                404,
                "this server has no upstream engine, so it only renders, tokenizes and "
                "parses; start it with --upstream URL to serve completions",
            )
        return endpoint

    async def read_engines(self) -> None:
        """Read every model's engine (concurrently) and update what it agrees with."""
        async with anyio.create_task_group() as group:
            for model in self.models:
                if model.config.upstream is not None:
                    group.start_soon(self._read_engine, model)

    async def _read_engine(self, model: ServedModel) -> None:
        try:
            facts = await read_engine(
                self.upstream(), model.config, model.config.upstream_model, self.upstream_key
            )
        except UpstreamError as exc:
            model.engine = EngineStatus(model.engine.facts, exc.message)
            LOGGER.warning(
                "model %s: engine not read: %s (%s)", model.name, exc.message, exc.url or "-"
            )
            return
        model.engine = EngineStatus(facts, None)
        model.plan = TokenPlan.decide(model.tokenizer, model.tokenizer_description, facts)

    @property
    def upstream_key(self) -> str | None:
        """The key the gateway itself sends upstream (probes, and requests when set)."""
        return self.config.upstream_api_key

    def open_stream_scope(self) -> anyio.CancelScope:
        """A scope for one streamed response; :meth:`drain` cancels it. Pair with
        :meth:`close_stream_scope`."""
        scope = anyio.CancelScope()
        self._streams.add(scope)
        return scope

    def close_stream_scope(self, scope: anyio.CancelScope) -> None:
        self._streams.discard(scope)

    def drain(self) -> None:
        """The server is stopping: after the grace period, end every stream still open
        (each then sends an error event). Call in the event loop's thread."""
        self.draining = True
        asyncio.get_running_loop().call_later(self.config.shutdown_grace, self._end_streams)

    def _end_streams(self) -> None:
        for scope in list(self._streams):
            scope.cancel()

    async def close_upstream(self) -> None:
        """Close the upstream client (it belongs to the event loop that used it; the next
        use makes a new one). The state store stays open."""
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None

    async def aclose(self) -> None:
        """The app stops: close the upstream client and the state store."""
        await self.close_upstream()
        await self.reasoning.store.aclose()


@dataclass(frozen=True)
class Route:
    """Where one gateway request goes: its model, the upstream endpoint and client, and
    the key sent (``forwarded``: the client's own)."""

    model: ServedModel
    endpoint: str
    client: UpstreamClient
    key: str | None
    forwarded: bool

    def sent_by(self, kind: UpstreamKind) -> Route:
        """This route for a request that ``kind`` planned (its own route beside the
        model's endpoint, when it is not the model's kind)."""
        endpoint = self.model.config.endpoint_of(kind)
        return self if endpoint is None else replace(self, endpoint=endpoint)


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
