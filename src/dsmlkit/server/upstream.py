"""The gateway's one HTTP client: POST a streaming request upstream, read its SSE chunks.

Every way an upstream can fail becomes an :class:`UpstreamError` with a ``kind`` the
routes turn into an error in the client's API shape; nothing here ever waits forever
(connect and read timeouts always apply).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.http_exceptions
import aiohttp.tracing
import orjson
from yarl import URL

from dsmlkit.parse.arguments import LONE_SURROGATE
from dsmlkit.server.config import redacted
from dsmlkit.server.errors import UpstreamError

LOGGER = logging.getLogger("dsmlkit.server")

#: The content type of upstream request bodies.
JSON = "application/json"
#: How long an idle upstream connection stays in the pool.
_KEEPALIVE_SECONDS = 4.0
#: How much of an upstream error body is read to quote its message.
_ERROR_BODY_LIMIT = 64 * 1024
#: The default longest SSE line (or event) read from an upstream body (``--upstream-max-line-mb``).
MAX_LINE_BYTES = 8 * 1024 * 1024
#: How often, at most, a waiting read of an upstream body checks its connection and clock.
_WATCH_SECONDS = 1.0


def error_message(body: bytes) -> str:
    """The human message inside an upstream error body (OpenAI, FastAPI or plain text)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    return _message_in(data) or text[:500]


def _message_in(data: Any) -> str | None:
    """``error.message`` / ``error.detail`` / ``error`` (a string) / ``message`` / ``detail``."""
    if not isinstance(data, dict):
        return None
    error = data.get("error", data)
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if isinstance(error.get(key), str):
                return str(error[key])
    return None


class UpstreamStream:
    """An open upstream response: iterate its JSON chunks, then (always) :meth:`close`.

    Iteration ends at ``data: [DONE]`` or at the end of the body; ``seconds`` is the time
    from sending the request to the end of the stream (or to now, while it runs). The
    client's deadline (aiohttp's total timeout, armed once per request) covers the body.

    ``waited`` is the part of that time spent waiting on the upstream (for the response
    headers, then for each read of the body); ``gaps`` holds the gateway's own time per read,
    from its arrival to the next read (or to the end of the stream).

    ``read`` returns the body's next read as it arrives (``b""`` at its end); ``close``
    releases the response (its connection goes back to the pool when the body was read to
    its end, else it is closed). A line or event longer than ``max_line`` bytes ends the
    stream with an error, before more of it is read.
    """

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        close: Callable[[], object],
        sent_at: float,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self._read = read
        self._close = close
        self._sent_at = sent_at
        self._max_line = max_line
        self._ended_at: float | None = None
        self._arrived: float | None = None  # when the last read came, while it is handled
        self.waited = time.perf_counter() - sent_at
        self.gaps: list[float] = []

    @property
    def seconds(self) -> float:
        return (self._ended_at or time.perf_counter()) - self._sent_at

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The ``data:`` payloads, decoded, one list per read of the body (never empty).

        A busy engine's events arrive several to a read; taking them together costs one
        pass through the event loop per read instead of one per event. The body is split
        into lines here, on bytes (``\n``, ``\r\n`` or ``\r``, as SSE allows), and each
        event's payload goes to the JSON decoder as it is. Upstream ``{"error": …}`` payloads
        raise.
        """
        lines = _SseLines(self._max_line)
        read = self._read
        try:
            while True:
                asked = self._handled()
                try:
                    block = await read()
                finally:
                    self.waited += time.perf_counter() - asked  # waiting on the upstream
                if not block:
                    batch = lines.close()
                    if batch:
                        yield batch
                    break
                self._arrived = time.perf_counter()
                batch, done = lines.feed(block)
                if batch:
                    yield batch
                if done:
                    break
            if lines.failure is not None:
                raise lines.failure  # after the events before it
        except aiohttp.ServerTimeoutError as exc:
            raise UpstreamError("timeout", "the upstream stopped sending (read timeout)") from exc
        except asyncio.TimeoutError as exc:  # the total timeout: the gateway's deadline
            raise UpstreamError(
                "timeout", "the upstream request ran past the gateway's deadline"
            ) from exc
        except aiohttp.ClientPayloadError as exc:
            raise _payload_error(exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("broken", f"the upstream stream broke off: {_reason(exc)}") from exc
        finally:
            self._ended_at = self._handled()

    def _handled(self) -> float:
        """Now; the read that arrived last is handled (its gap is noted once)."""
        now = time.perf_counter()
        if self._arrived is not None:
            self.gaps.append(now - self._arrived)
            self._arrived = None
        return now

    def close(self) -> None:
        """Close the response (it does not wait, so a cancellation cannot cut it short)."""
        self._handled()
        self._close()


def _payload_error(exc: aiohttp.ClientPayloadError) -> UpstreamError:
    """A body that cannot be decoded (its content encoding) is malformed; one cut short is
    broken."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.http_exceptions.ContentEncodingError):
        return UpstreamError("malformed", f"the upstream body cannot be decoded: {cause.message}")
    return UpstreamError("broken", f"the upstream stream broke off: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    """What went wrong, in words that never name the upstream's host or URL (aiohttp puts
    them into the text of its connection and response errors)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error  # asyncio's own text for it names the address: "Connect call …"
        if isinstance(cause, socket.gaierror) or not cause.errno:
            return cause.strerror or type(cause).__name__
        return os.strerror(cause.errno)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the upstream closed the connection"
    if isinstance(exc, aiohttp.ClientOSError):  # its text may be "… for URL"
        errno = exc.errno or getattr(exc.__cause__, "errno", None)
        return os.strerror(errno) if isinstance(errno, int) else "the connection failed"
    if isinstance(exc, aiohttp.ClientResponseError):  # the first line, without the bytes
        return (exc.message or type(exc).__name__).splitlines()[0].rstrip(":")
    if isinstance(exc, aiohttp.InvalidURL):
        return "the upstream URL is not valid"
    return str(exc) or type(exc).__name__


class _SseLines:
    """An SSE body read in blocks → the decoded ``data:`` payloads of its complete events.

    State: ``_rest`` holds the unfinished last line in parts (with a held ``\r`` that may
    begin a ``\r\n`` split across reads; a block with no line end is only added to it,
    so a long line costs its length once), ``_data`` the data lines of the event being
    read; a blank line ends an event, ``[DONE]`` ends the stream, and so does an event that
    cannot be read, or a line or event longer than ``max_line`` bytes (``failure``; the
    events before it in the same read are still returned).
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._rest: list[bytes] = []
        self._rest_size = 0
        self._data: list[bytes] = []
        self._data_size = 0
        self._max_line = max_line
        self.failure: UpstreamError | None = None

    def feed(self, block: bytes) -> tuple[list[dict[str, Any]], bool]:
        """The events completed by ``block``, and whether the stream ended in it."""
        if b"\n" not in block and b"\r" not in block:  # inside a line
            self._rest.append(block)
            self._rest_size += len(block)
            return [], self._too_long(self._rest_size)
        text = b"".join((*self._rest, block)) if self._rest else block
        held = b""
        if b"\r" in text:
            if text.endswith(b"\r"):
                text, held = text[:-1], b"\r"
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        rest = lines.pop() + held
        self._rest = [rest] if rest else []
        self._rest_size = len(rest)
        batch, done = self._read(lines)
        return batch, done or self._too_long(self._rest_size)

    def close(self) -> list[dict[str, Any]]:
        """At the end of the body: the last line, and an event left without its blank line."""
        rest = b"".join(self._rest).removesuffix(b"\r")
        return self._read([rest, b""] if rest else [b""])[0]

    def _too_long(self, size: int) -> bool:
        """Whether ``size`` bytes of one line or event are past the limit (then failed)."""
        if size <= self._max_line:
            return False
        self.failure = UpstreamError(
            "malformed",
            f"the upstream sent an SSE line or event longer than {_megabytes(self._max_line)} "
            "(the gateway's --upstream-max-line-mb)",
        )
        return True

    def _read(self, lines: list[bytes]) -> tuple[list[dict[str, Any]], bool]:
        batch: list[dict[str, Any]] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
                self._data_size += len(line)
                if self._too_long(self._data_size):
                    return batch, True
                continue
            if line or not data:
                continue  # comments, other fields; blank lines between events
            payload = data[0] if len(data) == 1 else b"\n".join(data)
            data.clear()
            self._data_size = 0
            if payload == b"[DONE]":
                return batch, True
            try:
                batch.append(_decode_chunk(payload))
            except UpstreamError as exc:
                self.failure = exc
                return batch, True
        return batch, False


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"


def _decode_chunk(data: bytes) -> dict[str, Any]:
    try:
        chunk = _json_of(data)
    except UnicodeDecodeError:  # not UTF-8: read as text with replacement characters
        return _decode_chunk(data.decode("utf-8", "replace").encode())
    except (ValueError, RecursionError):
        raise UpstreamError(
            "malformed", f"the upstream sent an SSE event that is not JSON: {_quoted(data)}"
        ) from None
    if not isinstance(chunk, dict):
        raise UpstreamError("malformed", f"the upstream sent a non-object chunk: {_quoted(data)}")
    if "error" in chunk:
        status = _status_of(chunk["error"])
        raise UpstreamError(
            "reported",
            "the upstream reported an error mid-stream"
            + (f" ({status})" if status else "")
            + ": "
            + (_message_in(chunk) or json.dumps(chunk)[:500]),
            status=status,
        )
    choices = chunk.get("choices")
    if choices is not None and not (
        isinstance(choices, list) and all(isinstance(c, dict) for c in choices)
    ):
        raise UpstreamError(
            "malformed",
            f"the upstream sent a chunk whose choices is not a list of objects: {_quoted(data)}",
        )
    usage = chunk.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise UpstreamError(
            "malformed",
            f"the upstream sent a chunk whose usage is not an object: {_quoted(data)}",
        )
    return chunk


def _json_of(data: bytes) -> Any:
    """``data`` decoded by orjson (a fifth of the standard decoder's time on a chunk), or
    for what orjson refuses (bytes that are not UTF-8, ``NaN``, integers past 64 bits, very
    deep nesting, lone surrogate escapes) by the standard decoder, whose rules then decide;
    a lone surrogate it lets through (``"\\ud800"``: not text, and no answer could be
    encoded with it) is read as U+FFFD, as bytes that are not UTF-8 are."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _without_lone_surrogates(json.loads(data))


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_lone_surrogates(key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    return value


def _json_body(value: Any) -> bytes:
    """An upstream request body (an engine reads it; no one compares its bytes): orjson,
    or the standard encoder for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _quoted(data: bytes) -> str:
    """The start of a payload, for a message."""
    return repr(data.decode("utf-8", "replace")[:200])


def _status_of(error: Any) -> int | None:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code <= 599 else None


def _connection_closed() -> UpstreamError:
    """The error of a read that waits on a connection already closed."""
    return UpstreamError("broken", "the upstream stream broke off: its connection was closed")


class _Body:
    """An open upstream response's body, read block by block.

    A read that waits longer than the read timeout raises aiohttp's read timeout error,
    and one that waits on a connection already closed raises a connection error: aiohttp
    drops its own read timeout when its parser fails mid-body (a broken chunked encoding),
    and its read then waits for as long as the engine holds the socket open. One timer per
    response checks, every :data:`_WATCH_SECONDS` at most and only while a read waits;
    time the gateway spends not reading (a client that is not reading) is not counted.

    ``close`` puts the connection back in the pool when the body was read to its end, else
    closes it.
    """

    def __init__(self, response: aiohttp.ClientResponse, timeout: float) -> None:
        self._response = response
        self._content = response.content
        self._timeout = timeout
        self._every = min(timeout, _WATCH_SECONDS)
        self._loop = asyncio.get_running_loop()
        self._since: float | None = None  # when the read that waits now began
        self._timer: asyncio.TimerHandle | None = None
        self._ended = False

    async def read(self) -> bytes:
        self._since = now = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(now + self._every, self._check)
        try:
            block = await self._content.readany()
        except RuntimeError as exc:  # aiohttp's "Connection closed." once its parser failed
            raise _connection_closed() from exc
        finally:
            self._since = None
        self._ended = not block
        return block

    def _check(self) -> None:
        self._timer = None
        since = self._since
        if since is None:
            return  # no read waits: the next one sets the timer
        now = self._loop.time()
        connection = self._response.connection
        if connection is None or connection.transport is None:
            self._content.set_exception(_connection_closed())
        elif now - since >= self._timeout:
            self._content.set_exception(aiohttp.ServerTimeoutError("read timeout"))
        else:
            due = min(now + self._every, since + self._timeout)
            self._timer = self._loop.call_at(due, self._check)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ended:
            self._response.release()
        else:
            self._response.close()


class _Attempt:
    """One try of an upstream request: ``reused`` says it went out on a pooled connection
    (noted by :func:`_note_reuse`)."""

    reused = False


async def _note_reuse(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.tracing.TraceConnectionReuseconnParams,
) -> None:
    attempt = context.trace_request_ctx
    if isinstance(attempt, _Attempt):
        attempt.reused = True


class UpstreamClient:
    """The gateway's pooled HTTP client (one aiohttp session per event loop); endpoints are
    chosen by the operator, never by a request.

    Make it inside the event loop that uses it, and :meth:`aclose` it there.
    """

    def __init__(
        self,
        *,
        read_timeout: float,
        connect_timeout: float,
        deadline: float,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self._read_timeout = read_timeout
        self._max_line = max_line
        self._stream_timeout = aiohttp.ClientTimeout(
            total=deadline, connect=connect_timeout, sock_read=read_timeout
        )
        self._json_timeout = aiohttp.ClientTimeout(
            total=read_timeout, connect=connect_timeout, sock_read=read_timeout
        )
        # idle connections are dropped before an engine under uvicorn drops them (its
        # keep-alive timeout is 5 s), so none is taken from the pool as it closes
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_SECONDS)
        reuse = aiohttp.TraceConfig()
        reuse.on_connection_reuseconn.append(_note_reuse)
        self._session = _session(connector, [reuse])
        # a request that failed on a pooled connection before any answer is sent once more
        # on a connection of its own: an engine may close an idle connection without
        # saying so, and the pool may hold more such connections
        self._fresh = _session(aiohttp.TCPConnector(limit=0, force_close=True), [])
        self._urls: dict[str, URL] = {}  # the operator's endpoints, each parsed once

    async def open_stream(
        self,
        endpoint: str,
        body: dict[str, Any],
        auth: Mapping[str, str],
        extra_headers: Mapping[str, str],
        *,
        clients_key: bool = False,
    ) -> UpstreamStream:
        """Send ``body`` with ``auth`` (the headers that carry the key, as the upstream kind
        writes them) and ``extra_headers`` (the request id, the trace context) and wait for
        the response headers; a 4xx/5xx raises at once.

        ``clients_key`` says the key is the client's own (forwarded): an upstream 401 or
        403 is then the client's problem, else the gateway's (kind ``auth``).
        """
        headers = {**extra_headers, "accept": "text/event-stream", "content-type": JSON, **auth}
        sent_at = time.perf_counter()
        url = self._urls.get(endpoint) or self._urls.setdefault(endpoint, URL(endpoint))
        data = _json_body(body)
        attempt = _Attempt()
        try:
            try:
                response = await self._post(self._session, url, data, headers, attempt)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if not attempt.reused:
                    raise
                LOGGER.info("upstream request retried on a new connection: %s", _reason(exc))
                response = await self._post(self._fresh, url, data, headers, None)
        except asyncio.TimeoutError as exc:
            raise UpstreamError("timeout", "the upstream did not answer in time") from exc
        except aiohttp.ClientPayloadError as exc:
            raise _payload_error(exc) from exc
        except aiohttp.ClientResponseError as exc:  # an answer that is not HTTP
            raise UpstreamError(
                "malformed", f"the upstream's answer cannot be read: {_reason(exc)}"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("connect", f"cannot reach the upstream: {_reason(exc)}") from exc
        if response.status >= 400:
            try:
                body_bytes = await _read_limited(response)
            finally:
                response.release()
            status = response.status
            said = f"the upstream answered {status}: {error_message(body_bytes)}"
            if status in (401, 403) and not clients_key:
                raise UpstreamError(
                    "auth", f"{said} (check the gateway's upstream key, DSMLKIT_UPSTREAM_API_KEY)"
                )
            raise UpstreamError("status", said, status=status)
        content_type = response.headers.get("content-type", "")
        if not content_type.startswith("text/event-stream"):
            response.close()
            raise UpstreamError(
                "malformed",
                f"the upstream answered {content_type or 'no content type'}, not an event stream",
            )
        response_body = _Body(response, self._read_timeout)
        return UpstreamStream(response_body.read, response_body.close, sent_at, self._max_line)

    async def _post(
        self,
        session: aiohttp.ClientSession,
        url: URL,
        data: bytes,
        headers: dict[str, str],
        attempt: _Attempt | None,
    ) -> aiohttp.ClientResponse:
        """POST ``data`` and wait for the response headers (``attempt`` notes a pooled
        connection)."""
        return await session.post(
            url,
            data=data,
            headers=headers,
            timeout=self._stream_timeout,
            allow_redirects=False,  # as before: a redirect is an answer, not followed
            trace_request_ctx=attempt,
        )

    async def get_json(self, url: str, auth: Mapping[str, str], body: Any = None) -> Any:
        """GET (or, with ``body``, POST) ``url`` with ``auth`` (the headers that carry the
        key) and decode its JSON answer, within the upstream timeout; every failure raises
        :class:`UpstreamError`, whose message names the engine's route (``the engine's
        /tokenize``), not the URL."""
        headers = dict(auth)
        said = f"the engine's {urlsplit(url).path or '/'}"
        shown = redacted(url)
        method, data = ("GET", None) if body is None else ("POST", _json_body(body))
        if data is not None:
            headers["content-type"] = JSON
        try:
            async with self._session.request(
                method,
                url,
                data=data,
                headers=headers,
                timeout=self._json_timeout,
                allow_redirects=False,
            ) as response:
                content = await response.read()
                status = response.status
        except asyncio.TimeoutError as exc:
            raise UpstreamError("timeout", f"{said} did not answer in time", url=shown) from exc
        except aiohttp.ClientPayloadError as exc:
            failure = _payload_error(exc)
            raise UpstreamError(failure.kind, f"{said}: {failure.message}", url=shown) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(
                "connect", f"cannot reach {said}: {_reason(exc)}", url=shown
            ) from exc
        if status >= 400:
            raise UpstreamError(
                "status",
                f"{said} answered {status}: {error_message(content)}",
                status=status,
                url=shown,
            )
        try:
            return _json_of(content)
        except ValueError:
            raise UpstreamError(
                "malformed", f"{said} did not answer with JSON", url=shown
            ) from None

    async def aclose(self) -> None:
        await self._session.close()
        await self._fresh.close()


def _session(
    connector: aiohttp.TCPConnector, traces: list[aiohttp.TraceConfig]
) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        skip_auto_headers=("user-agent",),
        # one client serves every request: a cookie an upstream sets must not go out with
        # the next client's request
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=traces,
    )


async def _read_limited(response: aiohttp.ClientResponse) -> bytes:
    parts: list[bytes] = []
    size = 0
    try:
        while size < _ERROR_BODY_LIMIT and (part := await response.content.readany()):
            parts.append(part)
            size += len(part)
    except (aiohttp.ClientError, OSError):
        pass  # a body that breaks off still has a useful beginning
    return b"".join(parts)[:_ERROR_BODY_LIMIT]
