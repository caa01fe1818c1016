"""Running the app under uvicorn: the logs, the header timeout, workers and a clean stop.

* every log line is one JSON object (:class:`JsonFormatter`) or, with ``--log-format text``,
  one line of text (:class:`TextFormatter`); Python warnings included;
* the HTTP protocol (uvicorn's httptools one when installed, else h11; the event loop is
  uvloop when installed) closes a connection whose request headers are not complete
  within the header timeout (slowloris), on the first request and on every keep-alive one;
* SIGINT / SIGTERM stop the server without a traceback: uvicorn stops accepting and lets
  running requests finish; after the grace period the app ends every stream still open
  with an error event (see :func:`dsmlkit.server.app.create_app`), before uvicorn's own
  timeout (two seconds later) closes what is left;
* ``--workers N`` runs N processes on one socket; each builds its app with
  :func:`app_from_environment` from the settings the parent put in the environment, and
  their metrics meet in one directory (:func:`metrics_directory`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import gc
import glob
import json
import logging
import math
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from dsmlkit.server.app import create_app
from dsmlkit.server.config import ConfigError, ModelConfig, ServerConfig
from dsmlkit.server.metrics import MULTIPROC_ENV
from dsmlkit.server.reqlog import ACCESS_LOGGER, CURRENT_REQUEST, FIELDS

#: The environment variable that carries the settings to ``--workers`` processes.
CONFIG_ENV = "DSMLKIT_SERVE_SETTINGS"
LOG_LEVEL_ENV = "DSMLKIT_LOG_LEVEL"
LOG_FORMAT_ENV = "DSMLKIT_LOG_FORMAT"


def _iso_time(record: logging.LogRecord) -> str:
    """The record's time in ISO 8601, UTC, to the millisecond (``2026-01-02T03:04:05.678Z``)."""
    moment = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _line_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A structured line's fields (:func:`~dsmlkit.server.reqlog.log_event`), else
    ``event: log`` and the message; a line written while a request is answered and that
    does not name it gets its id as ``request_id``."""
    fields: dict[str, Any] | None = getattr(record, FIELDS, None)
    line: dict[str, Any] = (
        dict(fields) if fields is not None else {"event": "log", "message": record.getMessage()}
    )
    request_id = CURRENT_REQUEST.get()
    if request_id is not None and line.get("id") != request_id:
        line["request_id"] = request_id
    return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line, written by one ``json.dumps``: :func:`_line_fields`, then
    the time (:func:`_iso_time`), level and logger, and a traceback as ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        line = _line_fields(record)
        line.update(time=_iso_time(record), level=record.levelname.lower(), logger=record.name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """One line for people: time (:func:`_iso_time`), level, logger, the message, then a
    structured line's other fields as ``key=value`` (values that are not plain words in
    JSON); a traceback follows on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _line_fields(record)
        if fields.get("event") == "log":
            del fields["event"], fields["message"]
        parts = [_iso_time(record), record.levelname, record.name, record.getMessage()]
        parts += (f"{key}={_text_value(value)}" for key, value in fields.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and value.isprintable() and " " not in value:
        return value
    return json.dumps(value, ensure_ascii=False)


#: ``--log-format``: the formatter of each.
FORMATTERS: dict[str, type[logging.Formatter]] = {"json": JsonFormatter, "text": TextFormatter}


def configure_logging(level: str, log_format: str = "json") -> None:
    """Send every logger (dsmlkit, uvicorn, Python warnings) to stderr, one line per
    record in ``log_format`` (a key of :data:`FORMATTERS`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[log_format]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "dsmlkit.server"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    ACCESS_LOGGER.setLevel(logging.INFO)
    logging.captureWarnings(True)


class _HeaderTimeout(asyncio.Protocol):
    """A mixin for uvicorn's HTTP protocols: request headers must arrive within a time
    limit (from their first byte; on the first request and on every keep-alive one)."""

    config: uvicorn.Config
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def _start_header_timer(self) -> None:
        self.header_timeout: float = getattr(self.config, "dsmlkit_header_timeout", 10.0)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers():
            self._arm()  # from the first byte of a request's headers, not from the last
        super().data_received(data)
        if not self._awaiting_headers():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return self.cycle is None or bool(self.cycle.response_complete)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self._awaiting_headers() and not self.transport.is_closing():
            self.transport.close()


class TimedH11Protocol(_HeaderTimeout, H11Protocol):
    """uvicorn's h11 protocol (pure Python), with the header timeout."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._start_header_timer()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: h11
    HTTP_PROTOCOL: type[asyncio.Protocol] = TimedH11Protocol
else:

    class TimedHttpToolsProtocol(_HeaderTimeout, HttpToolsProtocol):
        """uvicorn's httptools protocol (a C parser: much less CPU per request and per
        write than h11), with the header timeout."""

        def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            self._start_header_timer()

    HTTP_PROTOCOL = TimedHttpToolsProtocol


def settings_to_environment(config: ServerConfig) -> str:
    """``config`` as JSON for :data:`CONFIG_ENV`."""
    return json.dumps(dataclasses.asdict(config))


def app_from_environment() -> Any:
    """The app of one ``--workers`` process, from :data:`CONFIG_ENV`."""
    data = json.loads(os.environ[CONFIG_ENV])
    configure_logging(os.environ.get(LOG_LEVEL_ENV, "info"), os.environ.get(LOG_FORMAT_ENV, "json"))
    models = tuple(
        ModelConfig(**{**model, "aliases": tuple(model["aliases"])}) for model in data["models"]
    )
    app = create_app(ServerConfig(**{**data, "models": models}))
    _settle_heap()
    return app


def _settle_heap() -> None:
    """Collect once, then leave all that is alive now (the app, its tokenizers, the
    libraries) out of every later collection, as serving engines do once they are loaded: a
    full collection, which pauses every stream, then walks what requests made, not the whole
    server (docs/server.md, Benchmark, gives the pause before and after)."""
    gc.collect()
    gc.freeze()


def metrics_directory(workers: int) -> contextlib.AbstractContextManager[None]:
    """Where the worker processes' metrics meet, for the time the server runs; call it
    before any metric is made.

    A ``PROMETHEUS_MULTIPROC_DIR`` the operator set must be a directory; it is kept, but
    the metric files of an earlier run are deleted from it now, as ``prometheus_client``
    asks. Otherwise, with several workers, a fresh private directory is made before they
    start (they inherit it through the environment) and removed when the server has
    stopped; one worker needs none.
    """
    given = os.environ.get(MULTIPROC_ENV)
    if given is not None:
        if not os.path.isdir(given):
            raise ConfigError("is not a directory", f"{MULTIPROC_ENV}={given!r}")
        for stale in glob.glob(os.path.join(glob.escape(given), "*.db")):
            os.remove(stale)
        return contextlib.nullcontext()
    if workers == 1:
        return contextlib.nullcontext()
    return _private_metrics_directory()


@contextlib.contextmanager
def _private_metrics_directory() -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="dsmlkit-metrics-") as path:
        os.environ[MULTIPROC_ENV] = path
        try:
            yield
        finally:
            del os.environ[MULTIPROC_ENV]


def serve(
    app: Any,
    sock: socket.socket,
    *,
    workers: int,
    log_level: str,
    header_timeout: float,
) -> None:
    """Serve ``app`` (or, with several workers, the import path of a factory) on ``sock``."""
    config = uvicorn.Config(
        app,
        factory=isinstance(app, str),
        http=HTTP_PROTOCOL,
        access_log=False,
        log_config=None,
        log_level=log_level,
        workers=workers,
        timeout_graceful_shutdown=math.ceil(_settings_grace(app)) + 2,
        lifespan="on",
    )
    config.dsmlkit_header_timeout = header_timeout
    if workers > 1:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, sockets=[sock]).run()
    else:
        _settle_heap()
        uvicorn.Server(config).run(sockets=[sock])


def _settings_grace(app: Any) -> float:
    if isinstance(app, str):
        grace: float = json.loads(os.environ[CONFIG_ENV])["shutdown_grace"]
        return grace
    return float(app.state.dsmlkit.config.shutdown_grace)
