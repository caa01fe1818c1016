"""The gateway's one HTTP client: POST a streaming request upstream, read its SSE chunks.

Every way an upstream can fail becomes an :class:`UpstreamError` with a ``kind`` the
routes turn into an error in the client's API shape; nothing here ever waits forever
(connect and read timeouts always apply).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.http_exceptions
import orjson
from yarl import URL

from dsmlkit.parse.arguments import LONE_SURROGATE
from dsmlkit.server.config import redacted
from dsmlkit.server.errors import UpstreamError

#: The content type of upstream request bodies.
JSON = "application/json"
#: How long an idle upstream connection stays in the pool.
_KEEPALIVE_SECONDS = 4.0
#: How much of an upstream error body is read to quote its message.
_ERROR_BODY_LIMIT = 64 * 1024


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
    its end, else it is closed).
    """

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        close: Callable[[], object],
        sent_at: float,
    ) -> None:
        self._read = read
        self._close = close
        self._sent_at = sent_at
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
        lines = _SseLines()
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
    if isinstance(exc, aiohttp.ClientResponseError):
        return exc.message or type(exc).__name__
    if isinstance(exc, aiohttp.InvalidURL):
        return "the upstream URL is not valid"
    return str(exc) or type(exc).__name__


class _SseLines:
    """An SSE body read in blocks → the decoded ``data:`` payloads of its complete events.

    State: ``_rest`` is the unfinished last line (with a held ``\r`` that may begin a
    ``\r\n`` split across reads), ``_data`` the data lines of the event being read; a
    blank line ends an event, ``[DONE]`` ends the stream, and so does an event that cannot
    be read (``failure``; the events before it in the same read are still returned).
    """

    def __init__(self) -> None:
        self._rest = b""
        self._data: list[bytes] = []
        self.failure: UpstreamError | None = None

    def feed(self, block: bytes) -> tuple[list[dict[str, Any]], bool]:
        """The events completed by ``block``, and whether the stream ended in it."""
        text = self._rest + block if self._rest else block
        held = b""
        if b"\r" in text:
            if text.endswith(b"\r"):
                text, held = text[:-1], b"\r"
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self._rest = lines.pop() + held
        return self._read(lines)

    def close(self) -> list[dict[str, Any]]:
        """At the end of the body: the last line, and an event left without its blank line."""
        rest = self._rest.removesuffix(b"\r")
        return self._read([rest, b""] if rest else [b""])[0]

    def _read(self, lines: list[bytes]) -> tuple[list[dict[str, Any]], bool]:
        batch: list[dict[str, Any]] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
                continue
            if line or not data:
                continue  # comments, other fields; blank lines between events
            payload = data[0] if len(data) == 1 else b"\n".join(data)
            data.clear()
            if payload == b"[DONE]":
                return batch, True
            try:
                batch.append(_decode_chunk(payload))
            except UpstreamError as exc:
                self.failure = exc
                return batch, True
        return batch, False


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


class UpstreamClient:
    """The gateway's pooled HTTP client (one aiohttp session per event loop); endpoints are
    chosen by the operator, never by a request.

    Make it inside the event loop that uses it, and :meth:`aclose` it there.
    """

    def __init__(self, *, read_timeout: float, connect_timeout: float, deadline: float) -> None:
        self._stream_timeout = aiohttp.ClientTimeout(
            total=deadline, connect=connect_timeout, sock_read=read_timeout
        )
        self._json_timeout = aiohttp.ClientTimeout(
            total=read_timeout, connect=connect_timeout, sock_read=read_timeout
        )
        # idle connections are dropped before an engine under uvicorn drops them (its
        # keep-alive timeout is 5 s), so none is taken from the pool as it closes
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_SECONDS)
        self._session = aiohttp.ClientSession(
            connector=connector,
            skip_auto_headers=("user-agent",),
            # one client serves every request: a cookie an upstream sets must not go out
            # with the next client's request
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self._urls: dict[str, URL] = {}  # the operator's endpoints, each parsed once

    async def open_stream(
        self,
        endpoint: str,
        body: dict[str, Any],
        api_key: str | None,
        *,
        clients_key: bool = False,
    ) -> UpstreamStream:
        """Send ``body`` and wait for the response headers; a 4xx/5xx raises at once.

        ``clients_key`` says ``api_key`` is the client's own (forwarded): an upstream 401 or
        403 is then the client's problem, else the gateway's (kind ``auth``).
        """
        headers = {"accept": "text/event-stream", "content-type": JSON}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        sent_at = time.perf_counter()
        try:
            url = self._urls.get(endpoint) or self._urls.setdefault(endpoint, URL(endpoint))
            response = await self._session.post(
                url,
                data=_json_body(body),
                headers=headers,
                timeout=self._stream_timeout,
                allow_redirects=False,  # as before: a redirect is an answer, not followed
            )
        except asyncio.TimeoutError as exc:
            raise UpstreamError("timeout", "the upstream did not answer in time") from exc
        except aiohttp.ClientPayloadError as exc:
            raise _payload_error(exc) from exc
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
        return UpstreamStream(response.content.readany, response.release, sent_at)

    async def get_json(self, url: str, api_key: str | None, body: Any = None) -> Any:
        """GET (or, with ``body``, POST) ``url`` and decode its JSON answer, within the
        upstream timeout; every failure raises :class:`UpstreamError`, whose message
        names the engine's route (``the engine's /tokenize``), not the URL."""
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
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
