"""What ``dsmlkit serve`` was started with: frozen records, validated up front.

One :class:`ServerConfig` holds the server-wide settings and one :class:`ModelConfig` per
served model. The single-model fields of :class:`ServerConfig` (``dialect``, ``model``,
``upstream`` …) are the flags' shorthand for one model; ``models`` (from ``--config FILE``)
lists several. :func:`load_config_file` reads the TOML file.
"""

from __future__ import annotations

import ipaddress
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from dsmlkit.dialects import DEFAULT_DIALECT, get_dialect
from dsmlkit.errors import CallerError
from dsmlkit.server.sealing import read_secrets
from dsmlkit.server.upstream_kinds import DEFAULT_UPSTREAM_KIND, UPSTREAM_KINDS, UpstreamKind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: What to do with a ``max_tokens`` past what the engine's context leaves after the prompt.
MaxTokensPolicy = Literal["clamp", "reject"]
MAX_TOKENS_POLICIES: tuple[MaxTokensPolicy, ...] = ("clamp", "reject")

#: What to do with a request that carries images when the model's upstream kind cannot
#: take them (``/v1/completions``): send it to the engine's chat endpoint, or refuse it.
ImagesPolicy = Literal["route", "refuse"]
IMAGES_POLICIES: tuple[ImagesPolicy, ...] = ("route", "refuse")

#: ``--tokenizer none`` turns token ids off (prompts go upstream as text).
NO_TOKENIZER = "none"

_VERSION_SEGMENT = re.compile(r"/v\d+$")
#: The keys of one ``[[models]]`` table, exactly.
MODEL_KEYS = (
    "name",
    "aliases",
    "dialect",
    "upstream",
    "upstream_api",
    "upstream_model",
    "tokenizer",
)


def redacted(url: str) -> str:
    """``url`` fit to print or log: a user and password in it become ``***``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def host_name(host: str) -> str:
    """The name of a ``Host`` header or ``--host`` value: lower case, without its port and
    without the brackets of an IPv6 address (``[::1]:8000`` → ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") > 1:  # a bare IPv6 address
        return host
    return host.partition(":")[0]


def is_loopback_name(name: str) -> bool:
    """``localhost``, a name under ``.localhost`` (RFC 6761: always loopback, and so
    browsers resolve it) or a loopback IP address (``127.0.0.0/8``, ``::1``)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts(given: str | None, bind_host: str, api_key: str | None) -> tuple[str, ...] | None:
    """:attr:`ServerConfig.allowed_hosts` for ``--allowed-hosts GIVEN`` (comma-separated
    names; ``*`` allows any) on a server bound to ``bind_host``.

    Without the flag, a server bound to loopback with no ``api_key`` answers loopback
    names only (``()``), and any other answers any ``Host`` (None).
    """
    if given is None:
        loopback = is_loopback_name(host_name(bind_host))
        return () if loopback and api_key is None else None
    names = [name.strip().lower() for name in given.split(",")]
    if "*" in names:
        return None
    for name in names:
        if not name or host_name(name) != name.strip("[]"):
            raise ConfigError(
                f"{name!r} is not a host name: give names without a port, separated by "
                "commas (e.g. example.com,10.0.0.5), or * for any",
                "allowed_hosts",
            )
    return tuple(name.strip("[]") for name in names)


class ConfigError(CallerError):
    """A setting is wrong; ``where`` names the flag, or the file and key."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.reason = message
        self.where = where


@dataclass(frozen=True)
class ModelConfig:
    """One served model: the name clients use, its dialect and the engine behind it.

    ``upstream_model`` is the engine's served name (sent upstream as ``model``); None
    means: in completions mode learn it from the engine's ``/v1/models`` (else ``name``),
    in chat mode forward the client's own ``model``.
    """

    name: str
    dialect: str = DEFAULT_DIALECT.name
    upstream: str | None = None
    upstream_api: str = DEFAULT_UPSTREAM_KIND
    upstream_model: str | None = None
    tokenizer: str | None = None
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "dialect", get_dialect(self.dialect).name)
        except ValueError as exc:
            raise ConfigError(str(exc), "dialect") from None
        if self.upstream_api not in UPSTREAM_KINDS:
            names = " or ".join(repr(name) for name in UPSTREAM_KINDS)
            raise ConfigError(f"must be {names}, not {self.upstream_api!r}", "upstream_api")
        if self.upstream is not None:
            parts = urlsplit(self.upstream)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    f"must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                    f"not {redacted(self.upstream)!r}",
                    "upstream",
                )

    @property
    def names(self) -> tuple[str, ...]:
        """The name and every alias clients may ask for."""
        return (self.name, *self.aliases)

    @property
    def kind(self) -> UpstreamKind:
        """The upstream kind that ``upstream_api`` names."""
        return UPSTREAM_KINDS[self.upstream_api]

    @property
    def upstream_endpoint(self) -> str | None:
        """The full URL requests go to: ``…/v1/completions``, ``…/v1/chat/completions`` or
        ``…/v1/messages``.

        A URL already ending in ``/completions`` (or the kind's route) is used as given; one
        ending in a version segment (``/v1``, ``/api/v1``) gets the route appended; anything
        else (``https://api.deepseek.com/anthropic``) gets ``/v1/…``.
        """
        if self.upstream is None:
            return None
        route = self.kind.route
        base = self.upstream.rstrip("/")
        path = urlsplit(base).path
        if path.endswith(("/completions", route)):
            return base
        if _VERSION_SEGMENT.search(path):
            return base + route
        return base + "/v1" + route

    def endpoint_of(self, kind: UpstreamKind) -> str | None:
        """Where a request that ``kind`` plans goes: :attr:`upstream_endpoint` for the
        model's own kind, else that kind's route beside it (a request with images routed
        to ``…/v1/chat/completions``)."""
        if kind is self.kind:
            return self.upstream_endpoint
        base = self.upstream_api_base
        return None if base is None else base + kind.route

    @property
    def shown_endpoint(self) -> str | None:
        """:attr:`upstream_endpoint` fit to print (no credentials, see :func:`redacted`)."""
        endpoint = self.upstream_endpoint
        return None if endpoint is None else redacted(endpoint)

    @property
    def upstream_api_base(self) -> str | None:
        """The URL that ``/models`` hangs off (``…/v1``)."""
        endpoint = self.upstream_endpoint
        if endpoint is None:
            return None
        base = endpoint.rsplit("/chat/completions", 1)[0]
        return base.rsplit("/completions", 1)[0].removesuffix("/messages")

    @property
    def upstream_root(self) -> str | None:
        """The engine's root URL, where vLLM and SGLang serve ``/tokenize``."""
        base = self.upstream_api_base
        if base is None:
            return None
        return _VERSION_SEGMENT.sub("", base)


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one server; upstream URLs come only from here, never from a request.

    ``upstream_api_key`` is sent to every upstream as a bearer token; when it is unset and
    the server has no ``api_key`` of its own, the client's own key is forwarded instead.
    ``upstream_timeout`` bounds each wait for the upstream's next bytes,
    ``upstream_deadline`` a whole upstream request, ``body_timeout`` the arrival of a
    request body; on a stop signal, streams still open after ``shutdown_grace`` seconds end
    with an error event. ``max_tokens_policy``: a ``max_tokens`` larger than the engine's
    context leaves after the prompt is lowered to fit (``clamp``, noted) or a 400
    (``reject``). ``images``: a request with images to a model whose upstream kind takes none
    goes to the engine's chat endpoint (``route``) or is a 400 (``refuse``).
    """

    dialect: str = DEFAULT_DIALECT.name
    model: str | None = None
    upstream: str | None = None
    upstream_api: str = DEFAULT_UPSTREAM_KIND
    tokenizer: str | None = None
    models: tuple[ModelConfig, ...] = ()
    api_key: str | None = None
    upstream_api_key: str | None = None
    upstream_timeout: float = 600.0
    upstream_deadline: float = 3600.0
    #: The longest SSE line or event read from an upstream body, in bytes.
    upstream_max_line_bytes: int = 8 * 1024 * 1024
    connect_timeout: float = 10.0
    body_timeout: float = 60.0
    shutdown_grace: float = 5.0
    max_body_bytes: int = 32 * 1024 * 1024
    #: ``memory``, ``sqlite:PATH`` or a Redis URL (``redis://``, ``redis+sentinel://``,
    #: ``redis+cluster://``; see :mod:`.state_store`).
    state: str = "memory"
    #: What the ``memory`` store may hold, in bytes (least recently used entries go first).
    state_max_bytes: int = 256 * 1024 * 1024
    #: Signs Anthropic thinking blocks (see :mod:`.reasoning_store`) and seals Responses
    #: reasoning (``encrypted_content``): comma-separated secrets, the first one seals, any
    #: opens (:mod:`.sealing`); default: random.
    state_secret: str | None = None
    max_tokens_policy: MaxTokensPolicy = "clamp"
    images: ImagesPolicy = "route"
    #: Most deltas one ``/v1/parse`` request's ``chunk_size`` may split its text into: each
    #: costs about 600 bytes of memory while the answer is built, whatever the body size.
    parse_max_deltas: int = 20_000
    #: The ``Host`` names answered besides the loopback ones (:func:`is_loopback_name`);
    #: None answers any ``Host``. ``dsmlkit serve`` sets it with :func:`allowed_hosts`.
    allowed_hosts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dialect", self._shorthand().dialect)
        if self.allowed_hosts is not None:  # a list from the --workers environment
            object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))
        if self.max_tokens_policy not in MAX_TOKENS_POLICIES:
            raise ConfigError(
                f"must be 'clamp' or 'reject', not {self.max_tokens_policy!r}",
                "max_tokens_policy",
            )
        if self.images not in IMAGES_POLICIES:
            raise ConfigError(f"must be 'route' or 'refuse', not {self.images!r}", "images")
        for name in (
            "upstream_timeout",
            "upstream_deadline",
            "connect_timeout",
            "body_timeout",
            "shutdown_grace",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"must be positive and finite, not {value!r}", name)
        for name in ("max_body_bytes", "parse_max_deltas", "upstream_max_line_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError("must be positive", name)
        try:
            read_secrets(self.state_secret)
        except CallerError as exc:
            raise ConfigError(str(exc), "state_secret") from None
        if self.state_max_bytes <= 0:
            raise ConfigError("must be positive", "state_max_bytes")
        seen: set[str] = set()
        for model in self.models:
            for name in model.names:
                if name in seen:
                    raise ConfigError(f"the name {name!r} is used twice", "models")
                seen.add(name)

    def _shorthand(self) -> ModelConfig:
        return ModelConfig(
            name=self.model or f"deepseek-{get_dialect(self.dialect).name}",
            dialect=self.dialect,
            upstream=self.upstream,
            upstream_api=self.upstream_api,
            upstream_model=self.model,
            tokenizer=self.tokenizer,
        )

    @property
    def model_configs(self) -> tuple[ModelConfig, ...]:
        """Every served model: the ``models`` list, else the one the shorthand describes."""
        return self.models or (self._shorthand(),)

    @property
    def strict_routing(self) -> bool:
        """With a model list, a request must name one of its models; the shorthand's one
        model answers whatever ``model`` a request names."""
        return bool(self.models)

    @property
    def served_model(self) -> str:
        """The first model's name."""
        return self.model_configs[0].name

    @property
    def kind(self) -> UpstreamKind:
        """The upstream kind that ``upstream_api`` names."""
        return UPSTREAM_KINDS[self.upstream_api]

    @property
    def upstream_endpoint(self) -> str | None:
        """The first model's upstream endpoint."""
        return self.model_configs[0].upstream_endpoint


def load_config_file(path: str | Path) -> tuple[ModelConfig, ...]:
    """The ``[[models]]`` of a TOML file; any mistake raises :class:`ConfigError` naming
    the file and the key."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror or exc}", where) from None
    except UnicodeDecodeError:
        raise ConfigError("is not UTF-8 text", where) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML: {exc}", where) from None
    except RecursionError:  # the parser recurses once per level of arrays and tables
        raise ConfigError("is nested too deeply to be a models file", where) from None
    unknown = sorted(set(data) - {"models"})
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r} (only [[models]])", where)
    tables = data.get("models")
    if not isinstance(tables, list) or not tables:
        raise ConfigError("needs at least one [[models]] table", f"{where}: models")
    return tuple(_model(table, f"{where}: models[{i}]") for i, table in enumerate(tables))


def _model(table: Any, where: str) -> ModelConfig:
    if not isinstance(table, Mapping):
        raise ConfigError("must be a table", where)
    unknown = sorted(set(table) - set(MODEL_KEYS))
    if unknown:
        raise ConfigError(f"unknown key (keys: {', '.join(MODEL_KEYS)})", f"{where}.{unknown[0]}")
    for key in ("name", "dialect", "upstream", "upstream_api", "upstream_model", "tokenizer"):
        if key in table and not (isinstance(table[key], str) and table[key]):
            raise ConfigError("must be a non-empty string", f"{where}.{key}")
    for key in ("name", "dialect", "upstream"):
        if key not in table:
            raise ConfigError("is required", f"{where}.{key}")
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ConfigError("must be a list of non-empty strings", f"{where}.aliases")
    try:
        return ModelConfig(
            name=table["name"],
            dialect=table["dialect"],
            upstream=table["upstream"],
            upstream_api=table.get("upstream_api", DEFAULT_UPSTREAM_KIND),
            upstream_model=table.get("upstream_model", table["name"]),
            tokenizer=table.get("tokenizer"),
            aliases=tuple(aliases),
        )
    except ConfigError as exc:
        raise ConfigError(exc.reason, f"{where}.{exc.where}") from None
