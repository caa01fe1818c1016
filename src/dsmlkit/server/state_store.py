"""Where the gateway keeps state between requests: a small key-value store with expiry.

``--state`` picks one: ``memory`` (default; bounded in bytes, least recently used entries
go first, every entry expires; one process only), ``sqlite:PATH`` (a file that survives
restarts) or ``redis://HOST:PORT/DB`` (shared by several gateway replicas). Values are
strings, written with a time to live. Every operation that fails raises
:class:`StateStoreUnavailable`; the callers decide what a missing state means (the
reasoning round trip answers without it).
A setting that cannot be used raises :class:`StateSettingError` when the store is opened.

Users: :mod:`dsmlkit.server.reasoning_store` (what the model wrote, by call id) and the
Responses API (``store`` / ``previous_response_id``). Keys are namespaced by the caller
(``turn:…``, ``response:…``).
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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
#: After a failure the Redis store answers "unavailable" at once for this long.
REDIS_BACKOFF = 2.0


class StateStoreUnavailable(DsmlkitError):
    """The store could not be reached or failed (nobody's mistake in a request: the server
    answers without state, or 503 where state is the point); ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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
    if setting.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(setting)
    raise StateSettingError(
        f"--state must be memory, sqlite:PATH or redis://HOST:PORT/DB, not {setting!r}"
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


class RedisStore:
    """Redis through the ``redis`` package's asyncio client (pooled, with timeouts).

    Keys get a ``dsmlkit:`` prefix and Redis's own expiry; eviction beyond that is
    Redis's ``maxmemory-policy``. After a failure the store fails fast for
    :data:`REDIS_BACKOFF` seconds instead of waiting on a dead server in every request.
    """

    _PREFIX = "dsmlkit:"

    def __init__(self, url: str) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:
            raise StateSettingError(
                f"--state redis://… needs the redis package: {install_hint('server')}"
            ) from exc
        from redis.exceptions import RedisError

        self._errors: tuple[type[Exception], ...] = (RedisError, OSError)
        try:
            self._client = aioredis.Redis.from_url(
                url,
                socket_timeout=REDIS_TIMEOUT,
                socket_connect_timeout=REDIS_TIMEOUT,
                decode_responses=True,
            )
        except ValueError as exc:
            raise StateSettingError(f"--state {url!r}: {exc}") from exc
        kwargs = self._client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        self.description = f"redis://{where}/{kwargs.get('db', 0)}"
        self._failed_at: float | None = None
        self._last_error: str | None = None

    async def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        values = await self._call(self._client.mget, [self._PREFIX + key for key in wanted])
        return {key: value for key, value in zip(wanted, values, strict=True) if value is not None}

    async def put_many(self, items: Mapping[str, str], ttl: float = DEFAULT_TTL) -> None:
        if not items:
            return

        async def write() -> None:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, value in items.items():
                    pipe.set(self._PREFIX + key, value, px=max(1, int(ttl * 1000)))
                await pipe.execute()

        await self._call(write)

    async def check(self) -> StoreHealth:
        try:
            await self._call(self._client.ping, probe=True)
        except StateStoreUnavailable as exc:
            return StoreHealth(self.description, False, exc.message)
        return StoreHealth(self.description, True)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, operation: Any, *args: Any, probe: bool = False) -> Any:
        failed_at = self._failed_at
        if not probe and failed_at is not None and time.monotonic() - failed_at < REDIS_BACKOFF:
            raise StateStoreUnavailable(f"{self.description}: {self._last_error} (backing off)")
        try:
            result = await operation(*args)
        except self._errors as exc:
            self._failed_at = time.monotonic()
            self._last_error = f"{type(exc).__name__}: {exc}"
            raise StateStoreUnavailable(f"{self.description}: {self._last_error}") from exc
        self._failed_at = None
        return result
