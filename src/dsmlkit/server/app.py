"""The FastAPI app: routes, error envelopes, and one middleware for what every request gets
(a request id, the ``Host`` check, the API key check, the JSON media type check, the body
size limit, the log line and the metrics).

The middleware stands in front of FastAPI and calls the gateway's three routes itself: a
gateway request skips FastAPI's middleware stack, its routing and its per-route wrappers;
every other route goes through FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive, Scope, Send

import dsmlkit.server.inspector as inspector
import dsmlkit.server.local_routes as local_routes
import dsmlkit.server.pipeline as pipeline
from dsmlkit._version import __version__
from dsmlkit.api.errors import ApiError, api_error
from dsmlkit.errors import InvalidRequest
from dsmlkit.server.apis import api_for_path, error_response, upstream_api_error
from dsmlkit.server.config import ServerConfig, host_name, is_loopback_name
from dsmlkit.server.errors import Noted, UpstreamError
from dsmlkit.server.observer import RequestObserver, observer_of
from dsmlkit.server.reqlog import CURRENT_REQUEST, RequestRecord, request_id_from
from dsmlkit.server.state import ServerState, client_keys
from dsmlkit.server.tracing import trace_headers, tracing_from_environment

LOGGER = logging.getLogger("dsmlkit.server")

#: Paths that need no API key: liveness probes, and the inspector's static files (the page
#: holds no data; the routes it calls ask for the key like any client's).
OPEN_PATHS = frozenset({"/health", "/ready", *inspector.PAGE_FILES})


def create_app(config: ServerConfig | None = None) -> FastAPI:
    """The dsmlkit server for ``config`` (default: render-only, V4.1, bundled tokenizer).

    Loads the tokenizers now, so a bad ``--tokenizer`` fails at start-up; each model's
    engine is read when the app starts (an engine that is down is read again on
    ``/ready``).
    """
    state = ServerState.load(config or ServerConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.tracing = tracing_from_environment()
        await state.read_engines()
        for model in state.models:
            for problem in model.problems():
                LOGGER.error("model %s: %s", model.name, problem)
        with _drain_on_stop_signals(state):
            yield
        await state.aclose()
        if state.tracing is not None:
            state.tracing.shutdown()

    app = _App(
        title="dsmlkit",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.dsmlkit = state
    routers = (local_routes.router, pipeline.router, inspector.router)
    for router in routers:
        app.include_router(router)
    for kind, handler in _ERROR_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.add_exception_handler(Exception, _bug)  # a bug in one of FastAPI's routes
    routes = frozenset(getattr(r, "path", "") for router in routers for r in router.routes)
    posted = frozenset(
        route.path
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.methods == {"POST"}
    )
    direct = {
        route.path: route.endpoint
        for route in pipeline.router.routes
        if isinstance(route, APIRoute) and route.methods == {"POST"}
    }
    app.front = RequestMiddleware(app, state=state, routes=routes, posted=posted, direct=direct)
    return app


class _App(FastAPI):
    """FastAPI with :class:`RequestMiddleware` in front, outside FastAPI's own middleware
    (its error, body-limit and telemetry layers): every HTTP request meets it first, and a
    gateway request goes no further, skipping those layers on the way in and on every write
    (docs/server.md, Benchmark, gives what that saves)."""

    front: RequestMiddleware

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.front(scope, receive, send)


#: A route's endpoint: the request in, the response (an ASGI app) out.
Endpoint = Callable[[Request], Awaitable[Response]]


@contextmanager
def _drain_on_stop_signals(state: ServerState) -> Iterator[None]:
    """While the app runs in the main thread, SIGINT and SIGTERM also start draining its
    streams (uvicorn's own handlers, installed before start-up, still run first) and end
    the process with exit code 0 once uvicorn has stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield  # e.g. a test server in a thread: no signals reach it
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)
    }

    def handler(sig: int, frame: FrameType | None) -> None:
        earlier = previous[sig]
        if callable(earlier):
            earlier(sig, frame)
        server = getattr(earlier, "__self__", None)
        if isinstance(server, uvicorn.Server):
            # uvicorn raises the signal again once it has stopped, which kills the process
            # with it (SIGINT: a KeyboardInterrupt traceback); a requested stop exits cleanly.
            server._captured_signals.clear()
        if not state.draining:
            loop.call_soon_threadsafe(state.drain)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, earlier in previous.items():
            signal.signal(sig, earlier)


def _respond(request: Request, err: ApiError) -> JSONResponse:
    observer = observer_of(request)
    observer.failed(err.type, err.message)
    return error_response(api_for_path(request.url.path), err, observer.request_id)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, (ApiError, InvalidRequest))
    if isinstance(exc, Noted):
        observer_of(request).noted(exc.notes)
    return _respond(request, exc if isinstance(exc, ApiError) else api_error(exc))


async def _upstream_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UpstreamError)
    if exc.url is not None:  # the client's answer does not name it; the log does
        LOGGER.warning("request %s: %s: %s", observer_of(request).request_id, exc.url, exc.message)
    return _respond(request, upstream_api_error(exc))


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return _respond(request, ApiError.for_status(exc.status_code, str(exc.detail)))


def _internal_error(exc: Exception) -> ApiError:
    """The 500 a bug is answered with (the log line has the traceback)."""
    return ApiError.for_status(500, f"internal error ({type(exc).__name__})")


async def _bug(request: Request, exc: Exception) -> JSONResponse:
    """A bug in a FastAPI route: FastAPI answers with this, then raises it on to the
    request middleware, which logs it."""
    return _respond(request, _internal_error(exc))


_ERROR_HANDLERS: dict[type[Exception], Callable[[Request, Exception], Awaitable[JSONResponse]]] = {
    ApiError: _api_error,
    InvalidRequest: _api_error,  # a client's mistake: a 400
    UpstreamError: _upstream_error,
    HTTPException: _http_exception,
}


@dataclass(frozen=True)
class HostCheck:
    """Which ``Host`` headers the server answers: against DNS rebinding, where a web page
    whose name the attacker points at 127.0.0.1 reads the answers of a server on loopback.

    ``allowed`` (:attr:`ServerConfig.allowed_hosts`): the names answered besides the
    loopback ones; None answers every ``Host``. A request without ``Host`` (HTTP/1.0) is
    answered: browsers always send one.
    """

    allowed: tuple[str, ...] | None

    def refusal(self, headers: Headers) -> ApiError | None:
        """None, or the 403 for a ``Host`` this server does not answer."""
        host = headers.get("host")
        if self.allowed is None or host is None:
            return None
        name = host_name(host)
        if is_loopback_name(name) or name in self.allowed:
            return None
        return ApiError.for_status(
            403,
            f"this server does not answer for the host {host[:100]!r}: it answers loopback "
            "names (localhost, 127.0.0.1, [::1])"
            + (f" and {', '.join(self.allowed)}" if self.allowed else "")
            + "; its operator can add names with --allowed-hosts",
        )


def _is_json_media_type(content_type: str) -> bool:
    """``application/json`` or ``application/*+json``, parameters (``charset``) allowed."""
    media = content_type.partition(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _media_type_refusal(headers: Headers) -> ApiError | None:
    """None for a JSON body, else the 415 saying which header to send: a browser sends a
    ``text/plain`` or form body across origins without asking first, never a JSON one."""
    content_type = headers.get("content-type")
    if content_type is not None and _is_json_media_type(content_type):
        return None
    sent = f"{content_type[:100]!r}" if content_type is not None else "none"
    return ApiError.for_status(
        415,
        f"the request body must be JSON sent with the header 'Content-Type: "
        f"application/json' (the content type sent: {sent})",
    )


async def _call_direct(endpoint: Endpoint, scope: Scope, receive: Receive, send: Send) -> None:
    """Run a route's endpoint outside FastAPI, its errors answered as the app's handlers do."""
    request = Request(scope, receive, send)
    try:
        response: Response = await endpoint(request)
    except tuple(_ERROR_HANDLERS) as exc:
        handler = next(h for kind, h in _ERROR_HANDLERS.items() if isinstance(exc, kind))
        response = await handler(request, exc)
    await response(scope, receive, send)


class RequestMiddleware:
    """Pure ASGI middleware in front of every request of ``app`` (lifespan events pass
    through to it).

    The body is read here (up to ``max_body_bytes``) and replayed to the app, so an
    oversized body is refused before any work; disconnect messages still pass through.
    Before any body is used, a request is refused for its ``Host`` (:class:`HostCheck`),
    a missing API key, or, on a ``POST`` to one of ``posted``, a body that is not JSON
    (:func:`_media_type_refusal`). A ``POST`` to one of ``direct`` (path → endpoint) is
    answered by that endpoint here.
    """

    def __init__(
        self,
        app: FastAPI,
        state: ServerState,
        routes: frozenset[str],
        posted: frozenset[str],
        direct: Mapping[str, Endpoint],
    ) -> None:
        self.app = app
        self.state = state
        self.routes = routes
        self.posted = posted
        self.direct = direct
        self.hosts = HostCheck(state.config.allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await FastAPI.__call__(self.app, scope, receive, send)
            return
        path: str = scope["path"]
        api = api_for_path(path)
        route = path if path in self.routes else "other"  # bounded metric labels
        headers = Headers(scope=scope)
        request_id = request_id_from(headers.get("x-request-id"))
        forward = {"x-request-id": request_id, **trace_headers(headers)}
        tracing = self.state.tracing
        observer = RequestObserver(
            RequestRecord(id=request_id, method=scope["method"], route=route),
            api.name,
            forward,
            tracing.start(scope["method"], route, forward) if tracing is not None else None,
        )
        scope.setdefault("state", {})["observer"] = observer
        naming = CURRENT_REQUEST.set(request_id)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                observer.answered_with(message["status"])
                request_id = observer.request_id.encode()  # under both names the SDKs read
                headers = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id),
                    (b"request-id", request_id),
                ]
                message = {**message, "headers": headers}
            elif message.get("body"):
                observer.wrote()
            await send(message)

        try:
            body, refusal = await self._read_body(scope, receive, self._refusal(scope))
            if refusal is not None:
                observer.failed(refusal.type, refusal.message)
                await error_response(api, refusal, observer.request_id)(
                    scope, receive, send_with_id
                )
                return
            observer.received(sum(len(m.get("body", b"")) for m in body))
            endpoint = self.direct.get(path) if scope["method"] == "POST" else None
            if endpoint is None:
                await FastAPI.__call__(self.app, scope, _replay(body, receive), send_with_id)
            else:
                scope["app"] = self.app  # what FastAPI would have set (``request.app``)
                await _call_direct(endpoint, scope, _replay(body, receive), send_with_id)
        except Exception as exc:
            LOGGER.exception("request %s failed", observer.request_id)
            observer.failed("api_error", f"{type(exc).__name__}: {exc}")
            if not started:
                err = _internal_error(exc)
                await error_response(api, err, observer.request_id)(scope, receive, send_with_id)
        finally:
            observer.finish(self.state.metrics)
            CURRENT_REQUEST.reset(naming)

    def _refusal(self, scope: Scope) -> ApiError | None:
        """What a request is refused for before its body is used, in this order: its
        ``Host``, its API key, its content type; None when it is none of them."""
        headers = Headers(scope=scope)
        refusal = self.hosts.refusal(headers) or self._authorize(scope, headers)
        if refusal is None and scope["method"] == "POST" and scope["path"] in self.posted:
            return _media_type_refusal(headers)
        return refusal

    def _authorize(self, scope: Scope, headers: Headers) -> ApiError | None:
        expected = self.state.config.api_key
        if expected is None or scope["path"] in OPEN_PATHS:
            return None
        offered = client_keys(headers)
        if any(secrets.compare_digest(key.encode(), expected.encode()) for key in offered):
            return None
        return ApiError.for_status(
            401,
            "a valid API key is required: send it as 'Authorization: Bearer KEY' "
            "or as 'x-api-key: KEY'",
        )

    async def _read_body(
        self, scope: Scope, receive: Receive, refusal: ApiError | None
    ) -> tuple[list[Message], ApiError | None]:
        """The body's messages, or the error to answer with: ``refusal`` if given, 413
        past the size limit, 408 when the body does not arrive within the body timeout.

        A body that will be refused is still read, and dropped, until its end or the body
        timeout: a client that is still sending would otherwise get its connection closed
        under it (a reset) instead of the answer. A client that waits for ``100 Continue``
        has sent nothing yet and gets the answer at once.
        """
        limit = self.state.config.max_body_bytes
        too_large = ApiError.for_status(
            413, f"the request body is larger than the server's limit of {limit} bytes"
        )
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if refusal is None and declared.isdigit() and int(declared) > limit:
            refusal = too_large
        if refusal is not None and headers.get("expect", "").lower() == "100-continue":
            return [], refusal
        messages: list[Message] = []
        size = 0
        timeout = self.state.config.body_timeout
        with anyio.move_on_after(timeout):
            while True:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    return ([], refusal) if refusal else ([*messages, message], None)
                size += len(message.get("body", b""))
                if refusal is None and size > limit:
                    refusal = too_large
                if refusal is None:
                    messages.append(message)
                else:
                    messages.clear()  # nothing of it is kept while the rest is dropped
                if not message.get("more_body", False):
                    return ([], refusal) if refusal else (messages, None)
        if refusal is not None:
            return [], refusal
        return [], ApiError.for_status(
            408, f"the request body did not arrive within {timeout:g} seconds"
        )


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that first returns the body already read (as one message), then the
    real receive's messages (disconnects)."""
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
    pending: list[MutableMapping[str, Any]] = [
        {"type": "http.request", "body": body, "more_body": False}
    ]
    pending += [m for m in messages if m["type"] != "http.request"]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
