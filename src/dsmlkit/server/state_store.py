"""Where the gateway keeps state between requests: a small key-value store with expiry.

``--state`` picks one: ``memory`` (default; bounded in bytes, least recently used entries
go first, every entry expires; one process only), ``sqlite:PATH`` (a file that survives
restarts) or Redis, shared by several gateway replicas: one server (``redis://HOST:PORT/DB``),
the master a Sentinel names (``redis+sentinel://HOST:PORT[,…]/SERVICE[/DB]``) or a Cluster
(``redis+cluster://HOST:PORT[,…]``); see :class:`RedisSetting`. Values are
strings, written with a time to live. Every operation that fails raises
:class:`StateStoreUnavailable`; the callers decide what a missing state means (the
reasoning round trip answers without it). Its message is for the log: it may name the
store's address and the store's own error, so no error body quotes it.
A setting that cannot be used raises :class:`StateSettingError` when the store is opened.

What a value holds is its user's business, but every user reads its values through
:meth:`.reasoning_store.ReasoningMemory.read` with a decoder that raises
:class:`CorruptEntry` for a value not of its kind's form (bad JSON, wrong types or shape,
:func:`load_json` for the JSON part): such an entry is a miss, noted with its key, never
a failed request.

Users: :mod:`dsmlkit.server.reasoning_store` (what the model wrote, by call id) and the
Responses API (``store`` / ``previous_response_id``). Keys are namespaced by the caller
(``turn:…``, ``response:…``).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread

from dsmlkit.errors import CallerError, DsmlkitError, install_hint

#: How long an entry lives unless the caller says otherwise (seconds).
DEFAULT_TTL = 24 * 3600.0
#: What the memory store holds before it drops the least recently used entries (bytes).
DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024
#: What one memory entry costs besides its key and value: its slot and link in the
#: ordered dict, its tuple, expiry and size (measured: 216 bytes on CPython 3.11, 64-bit).
ENTRY_OVERHEAD = 220
#: Redis operations give up after this long, so a dead Redis never stalls a request.
REDIS_TIMEOUT = 0.5
#: After Redis did not answer, the Redis store answers "unavailable" at once for this long.
REDIS_BACKOFF = 2.0


class StateStoreUnavailable(DsmlkitError):
    """The store could not be reached or failed (nobody's mistake in a request: the server
    answers without state, or 503 where state is the point); ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CorruptEntry(DsmlkitError, ValueError):
    """A stored value that is not of the form its kind has; the message says what is wrong
    with it in words of its own (never quoting the value)."""


class StateSettingError(CallerError):
    """A ``--state`` setting of the wrong form, or a store it names that cannot be opened
    (the message names ``--state``)."""


@dataclass(frozen=True)
class StoreHealth:
    """What ``/ready`` reports for the state store."""

    backend: str
    ok: bool
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"backend": self.backend, "ok": self.ok}
        if self.error is not None:
            shown["error"] = self.error
        return shown


class StateStore(Protocol):
    """The store interface (all methods may raise :class:`StateStoreUnavailable`)."""

    #: ``memory``, ``sqlite:PATH`` or the Redis URL without a password.
    description: str

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """The values of those ``keys`` that exist and have not expired."""
        ...

    async def put_many(self, items: Mapping[str, str], ttl: float = DEFAULT_TTL) -> None:
        """Store every item, each expiring ``ttl`` seconds from now."""
        ...

    async def check(self) -> StoreHealth:
        """Probe the store (for ``/ready``); never raises."""
        ...

    async def aclose(self) -> None: ...


async def get_one(store: StateStore, key: str) -> str | None:
    """One value, or None."""
    return (await store.get_many([key])).get(key)


def load_json(value: str) -> Any:
    """The JSON ``value`` holds; :class:`CorruptEntry` when it is not JSON (or nests too
    deep to read)."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise CorruptEntry(f"not JSON ({type(exc).__name__})") from None


def open_store(setting: str, *, max_bytes: int = DEFAULT_MEMORY_BYTES) -> StateStore:
    """The store ``--state`` names (``max_bytes`` bounds a memory store); a setting that
    cannot be used raises :class:`StateSettingError`."""
    if setting == "memory":
        return MemoryStore(max_bytes)
    if setting.startswith("sqlite:"):
        path = setting.removeprefix("sqlite:")
        if not path:
            raise StateSettingError(
                "--state sqlite:PATH needs a file path, e.g. sqlite:/var/lib/ds.db"
            )
        return SqliteStore(path)
    if setting.startswith(REDIS_SCHEMES):
        return RedisStore(setting)
    raise StateSettingError(
        "--state must be memory, sqlite:PATH, redis://HOST:PORT/DB, "
        f"redis+sentinel://HOST:PORT/SERVICE or redis+cluster://HOST:PORT, not {setting!r}"
    )


def per_process(setting: str) -> bool:
    """Whether the store ``setting`` names lives inside one process (so ``--workers``
    processes would each have their own): ``memory`` and ``sqlite::memory:``."""
    return setting in ("memory", "sqlite::memory:")


def entry_size(key: str, value: str) -> int:
    """What a memory entry costs, in bytes: its key and value as Python holds them (one to
    four bytes a character, plus the string header) and :data:`ENTRY_OVERHEAD`."""
    return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD


class MemoryStore:
    """In-process store bounded in bytes, with TTL.

    Each entry counts :func:`entry_size`; once the entries hold more than ``max_bytes``,
    the least recently used (written or read) go first. A value larger than the whole
    bound is not kept. Expired entries are dropped when read.
    """

    description = "memory"

    def __init__(self, max_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        if max_bytes <= 0:
            raise CallerError("max_bytes must be positive")
        self.max_bytes = max_bytes
        #: What the entries hold now, in bytes (the sum of their :func:`entry_size`).
        self.size = 0
        self._entries: OrderedDict[str, tuple[float, str, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        now = time.monotonic()
        found: dict[str, str] = {}
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue
            if entry[0] <= now:
                self._drop(key)
                continue
            self._entries.move_to_end(key)
            found[key] = entry[1]
        return found

    async def put_many(self, items: Mapping[str, str], ttl: float = DEFAULT_TTL) -> None:
        expires = time.monotonic() + ttl
        for key, value in items.items():
            if key in self._entries:
                self._drop(key)
            size = entry_size(key, value)
            if size > self.max_bytes:
                continue  # it would push out everything else and then itself
            self._entries[key] = (expires, value, size)
            self.size += size
        while self.size > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        self.size -= self._entries.pop(key)[2]

    async def check(self) -> StoreHealth:
        return StoreHealth(self.description, True)

    async def aclose(self) -> None:
        self._entries.clear()
        self.size = 0


class SqliteStore:
    """A SQLite file (WAL mode); work runs in a thread so the event loop never waits on disk.

    Expired rows are ignored on read and deleted every ``_PURGE_EVERY`` writes.
    """

    _PURGE_EVERY = 500

    def __init__(self, path: str) -> None:
        self.description = f"sqlite:{path}"
        self._path = path
        self._lock = threading.Lock()
        self._writes = 0
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS state "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL NOT NULL)"
            )
        except sqlite3.Error as exc:
            raise StateSettingError(
                f"--state {self.description}: cannot open the file: {exc}"
            ) from exc

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        found: dict[str, str] = await self._run(self._get_many, wanted)
        return found

    async def put_many(self, items: Mapping[str, str], ttl: float = DEFAULT_TTL) -> None:
        if items:
            await self._run(self._put_many, dict(items), time.time() + ttl)

    async def check(self) -> StoreHealth:
        try:
            await self._run(lambda: self._db.execute("SELECT 1").fetchone())
        except StateStoreUnavailable as exc:
            return StoreHealth(self.description, False, exc.message)
        return StoreHealth(self.description, True)

    async def aclose(self) -> None:
        with self._lock:
            self._db.close()

    async def _run(self, work: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return work(*args)

        try:
            return await anyio.to_thread.run_sync(locked)
        except sqlite3.Error as exc:
            raise StateStoreUnavailable(f"{self.description}: {exc}") from exc

    def _get_many(self, keys: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        now = time.time()
        for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            batch = keys[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(
                f"SELECT key, value FROM state WHERE key IN ({marks}) AND expires > ?",
                [*batch, now],
            )
            found.update(rows.fetchall())
        return found

    def _put_many(self, items: dict[str, str], expires: float) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO state (key, value, expires) VALUES (?, ?, ?)",
                [(key, value, expires) for key, value in items.items()],
            )
        self._writes += 1
        if self._writes % self._PURGE_EVERY == 0:
            self._db.execute("DELETE FROM state WHERE expires <= ?", (time.time(),))


#: How ``--state`` names a Redis store: the URL schemes of :class:`RedisSetting`.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", "redis+cluster://")
#: The query options a Redis ``--state`` URL may carry (the ``redis`` package's names);
#: any other is refused, so a misspelt or unsupported one does not pass unnoticed.
REDIS_OPTIONS = frozenset({"max_connections", "health_check_interval", "socket_keepalive"})
#: The further options of a ``rediss://`` URL (TLS).
TLS_OPTIONS = frozenset(
    {"ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"}
)
#: The port of a Sentinel or a Cluster node the URL names without one.
DEFAULT_PORTS = {"redis+sentinel": 26379, "redis+cluster": 6379}


@dataclass(frozen=True)
class RedisSetting:
    """A Redis ``--state`` URL, checked.

    * ``redis://[USER:PASSWORD@]HOST:PORT/DB``, ``rediss://…`` (TLS), ``unix://PATH``: one
      server, read by the ``redis`` package as it is.
    * ``redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE[/DB]``: the Sentinels
      to ask (port 26379 when left out) for the master of ``SERVICE``; the credentials are
      the master's. Reads and writes go to the master, so a conversation read on another
      replica right after it was written finds it.
    * ``redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]``: nodes of a Redis Cluster
      (port 6379 when left out), from which the client learns the others.

    Query options (``?max_connections=50``) are those of :data:`REDIS_OPTIONS`, and of
    :data:`TLS_OPTIONS` after ``rediss://``; any other is a :class:`StateSettingError`.
    """

    #: ``redis``, ``rediss``, ``unix``, ``redis+sentinel`` or ``redis+cluster``.
    scheme: str
    #: The URL as given (``redis``, ``rediss``, ``unix``), or one node's URL with the
    #: credentials, database and options, which the ``redis`` package reads.
    url: str
    #: The Sentinels or Cluster nodes named, as (host, port).
    nodes: tuple[tuple[str, int], ...] = ()
    #: The service a Sentinel watches.
    service: str = ""
    #: How the logs and ``/ready`` name the store (no credentials).
    description: str = ""

    @classmethod
    def parse(cls, url: str) -> RedisSetting:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        taken = REDIS_OPTIONS | TLS_OPTIONS if scheme == "rediss" else REDIS_OPTIONS
        unknown = sorted(set(parse_qs(parts.query, keep_blank_values=True)) - taken)
        if unknown:
            hint = (
                "; for a Redis Cluster write redis+cluster://HOST:PORT[,HOST:PORT…]"
                if "cluster" in unknown
                else ""
            )
            raise StateSettingError(
                f"--state: the Redis URL option {unknown[0]!r} is not one dsmlkit takes "
                f"(it takes {', '.join(sorted(taken))}){hint}"
            )
        if scheme not in DEFAULT_PORTS:
            return cls(scheme, url)
        credentials, _, hosts = parts.netloc.rpartition("@")
        nodes = tuple(cls._node(node, DEFAULT_PORTS[scheme]) for node in hosts.split(","))
        path = [piece for piece in parts.path.split("/") if piece]
        if scheme == "redis+sentinel":
            if len(path) not in (1, 2) or (len(path) == 2 and not path[1].isdigit()):
                raise StateSettingError(
                    "--state redis+sentinel://HOST:PORT[,HOST:PORT…]/SERVICE[/DB] needs the "
                    f"service the Sentinels watch (and a database number), not {parts.path!r}"
                )
            service, database = path[0], int(path[1]) if len(path) == 2 else 0
            where = f"/{service}/{database}"
        else:
            if path:
                raise StateSettingError(
                    "--state redis+cluster://HOST:PORT[,HOST:PORT…] takes no path (a Redis "
                    f"Cluster has only database 0), not {parts.path!r}"
                )
            service, database, where = "", 0, ""
        (host, port), query = nodes[0], f"?{parts.query}" if parts.query else ""
        login = f"{credentials}@" if credentials else ""
        named = ",".join(f"{cls._host(h)}:{p}" for h, p in nodes)
        return cls(
            scheme,
            f"redis://{login}{cls._host(host)}:{port}/{database}{query}",
            nodes,
            service,
            f"{scheme}://{named}{where}",
        )

    @staticmethod
    def _node(text: str, default_port: int) -> tuple[str, int]:
        try:
            parts = urlsplit(f"//{text}")
            host, port = parts.hostname, parts.port
        except ValueError:
            host = None
        if not host:
            raise StateSettingError(
                f"--state: {text!r} is not HOST or HOST:PORT (a Sentinel or Cluster node)"
            )
        return host, port or default_port

    @staticmethod
    def _host(host: str) -> str:
        return f"[{host}]" if ":" in host else host

    def clients(self, **options: Any) -> list[Any]:
        """The ``redis`` package's asyncio client for this setting, made with ``options``
        (timeouts, decoding), then the clients it holds that are closed with it (the
        Sentinels'); they connect on first use."""
        import redis.asyncio as aioredis
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.connection import parse_url
        from redis.asyncio.sentinel import Sentinel

        if self.scheme == "redis+sentinel":
            # the credentials, database and options, for the master's connections
            given: dict[str, Any] = dict(parse_url(self.url))
            del given["host"], given["port"]
            timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
            sentinel = Sentinel(self.nodes, sentinel_kwargs=timeouts)
            master = sentinel.master_for(self.service, **given, **options)
            return [master, *sentinel.sentinels]
        if self.scheme == "redis+cluster":
            startup = [ClusterNode(host, port) for host, port in self.nodes[1:]]
            return [RedisCluster.from_url(self.url, startup_nodes=startup, **options)]
        return [aioredis.Redis.from_url(self.url, **options)]


class RedisStore:
    """Redis through the ``redis`` package's asyncio client (pooled, with timeouts): one
    server, a Sentinel's master or a Cluster (:class:`RedisSetting`).

    Keys get a ``dsmlkit:`` prefix and Redis's own expiry; eviction beyond that is
    Redis's ``maxmemory-policy``. On a Cluster, the keys of one read are read with one
    ``MGET`` per hash slot, all in one pipeline, and the writes of one ``put_many`` are
    one pipeline sent to each key's node. After Redis did not answer (connection refused
    or lost, timeout, no master or cluster node reachable) the store fails fast for
    :data:`REDIS_BACKOFF` seconds instead of waiting on a dead server in every request. An
    error Redis answers with (``OOM`` when ``maxmemory`` is reached under ``noeviction``,
    ``READONLY`` on a replica) took one round trip and fails that operation only: a full
    Redis refuses writes and keeps serving reads.
    """

    _PREFIX = "dsmlkit:"

    def __init__(self, url: str) -> None:
        try:
            import redis.asyncio  # noqa: F401 (the client's import, checked here)
        except ImportError as exc:
            raise StateSettingError(
                f"--state redis://… needs the redis package: {install_hint('server')}"
            ) from exc
        from redis.exceptions import ConnectionError as NoConnection
        from redis.exceptions import RedisClusterException, RedisError, ResponseError
        from redis.exceptions import TimeoutError as NoAnswer

        setting = RedisSetting.parse(url)
        # RedisClusterException: no node of the cluster could be reached
        self._unanswered: tuple[type[Exception], ...] = (
            NoConnection,
            NoAnswer,
            OSError,
            RedisClusterException,
        )
        self._errors: tuple[type[Exception], ...] = (RedisError, OSError, RedisClusterException)
        self._refusal = ResponseError
        try:
            self._clients = setting.clients(
                socket_timeout=REDIS_TIMEOUT,
                socket_connect_timeout=REDIS_TIMEOUT,
                decode_responses=True,
            )
        except (ValueError, RedisClusterException) as exc:
            raise StateSettingError(f"--state {setting.description or url!r}: {exc}") from exc
        self._client = self._clients[0]
        self.description = setting.description
        cluster = setting.scheme == "redis+cluster"
        # a Cluster's keys lie in many slots: one MGET per slot
        self._read = self._client.mget_nonatomic if cluster else self._client.mget
        if not self.description:
            kwargs = self._client.connection_pool.connection_kwargs
            where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
            self.description = f"redis://{where}/{kwargs.get('db', 0)}"
        self._failed_at: float | None = None
        self._last_error: str | None = None

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        values = await self._call(self._read, [self._PREFIX + key for key in wanted])
        return {key: value for key, value in zip(wanted, values, strict=True) if value is not None}

    async def put_many(self, items: Mapping[str, str], ttl: float = DEFAULT_TTL) -> None:
        if not items:
            return

        await self._call(self._write, items, ttl)

    async def _write(self, items: Mapping[str, str], ttl: float) -> None:
        """One pipeline of SETs. Its errors are taken as Redis answered them: redis-py
        would otherwise raise the first one with the command, key and value, quoted."""
        async with self._client.pipeline(transaction=False) as pipe:
            for key, value in items.items():
                pipe.set(self._PREFIX + key, value, px=max(1, int(ttl * 1000)))
            results = await pipe.execute(raise_on_error=False)
        for result in results:
            if isinstance(result, self._refusal):
                raise result

    async def check(self) -> StoreHealth:
        try:
            await self._call(self._client.ping, probe=True)
        except StateStoreUnavailable as exc:
            return StoreHealth(self.description, False, exc.message)
        return StoreHealth(self.description, True)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def _call(self, operation: Any, *args: Any, probe: bool = False) -> Any:
        failed_at = self._failed_at
        if not probe and failed_at is not None and time.monotonic() - failed_at < REDIS_BACKOFF:
            raise StateStoreUnavailable(f"{self.description}: {self._last_error} (backing off)")
        try:
            result = await operation(*args)
        except self._errors as exc:
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, self._unanswered):
                self._failed_at, self._last_error = time.monotonic(), error
            raise StateStoreUnavailable(f"{self.description}: {error}") from exc
        self._failed_at = None
        return result
