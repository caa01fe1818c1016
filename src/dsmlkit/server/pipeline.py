"""The gateway: ``POST /v1/chat/completions``, ``/v1/messages`` and ``/v1/responses``
through an upstream, as one pipeline that reads top to bottom.

Each stage is a function of the previous stage's value, and each lives in its own module:

1. **read body** — strict JSON (:mod:`.jsonbody`);
2. **route** — the served model the body names, its upstream and the key sent
   (:meth:`.state.ServerState.route`);
3. **typed request** — the API's reader (:class:`~dsmlkit.api.ClientApi`); a
   Responses body is read with the stored :class:`~.response_store.History` its
   ``previous_response_id`` names;
4. **restore state** — dropped reasoning and the model's own words put back on the typed
   conversation (:mod:`.restore`);
5. **plan** — the prompt or chat body, ``max_tokens``, forced calls (:mod:`.plan`);
6. **upstream** and **fold** — the upstream request(s) and the events they become, through
   the call gate (:mod:`.fold`);
7. **frames** — the API's stream writer or response builder;
8. **remember** — what the model wrote, and a Responses answer's turn, stored before the
   last frames go out (:mod:`.remember`).

No stage writes a log line: each returns its result (the :class:`~.restore.Restored`
request, the plan, fold's :class:`~.fold.Outcome`, the remember stage's
:class:`~.reasoning_store.Written`), with the lines it asks for as notes, and the route
hands them to the request's observer (:mod:`.observer`), which the middleware finishes.

The render routes (:mod:`.local_routes`) run stages 1–5 of the same functions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Coroutine
from contextlib import aclosing
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response

from dsmlkit.api import (
    CHAT,
    MESSAGES,
    RESPONSES,
    Answer,
    ChatRequest,
    ClientApi,
    ReadContext,
    StreamWriter,
    Usage,
)
from dsmlkit.api.common import response_diagnostics
from dsmlkit.api.errors import ApiError
from dsmlkit.api.sse import json_body
from dsmlkit.errors import InvalidRequest
from dsmlkit.parse import Event, MessageCollector
from dsmlkit.server.apis import upstream_api_error
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.event_stream import CancelOnDisconnect, EventStream, LastText
from dsmlkit.server.fold import Outcome, Upstream, fold
from dsmlkit.server.jsonbody import read_json
from dsmlkit.server.observer import RequestObserver, observer_of
from dsmlkit.server.offload import run_for_body
from dsmlkit.server.plan import PlanStage
from dsmlkit.server.remember import Remember
from dsmlkit.server.reqlog import Note
from dsmlkit.server.response_store import NO_HISTORY, History, stored_history
from dsmlkit.server.restore import Restored, restore
from dsmlkit.server.state import ServedModel, ServerState, state_of
from dsmlkit.server.upstream_kinds import UPSTREAM_HEADER, UpstreamPlan

LOGGER = logging.getLogger("dsmlkit.server")
T = TypeVar("T")

router = APIRouter()

#: How a request that lost its client is recorded (error type, message).
_DISCONNECTED = ("client_disconnected", "the client went away; the upstream request was closed")
#: Answers whose ``max_tokens`` was lowered to fit the context say so, with the value sent.
CLAMPED_HEADER = "x-dsmlkit-max-tokens-clamped"


@router.post(CHAT.path)
async def chat_completions(request: Request) -> Response:
    return await answer(request, CHAT)


@router.post(MESSAGES.path)
async def messages(request: Request) -> Response:
    return await answer(request, MESSAGES)


@router.post(RESPONSES.path)
async def responses(request: Request) -> Response:
    return await answer(request, RESPONSES)


async def answer(request: Request, api: ClientApi[Any]) -> Response:
    """One gateway request, stage by stage (see the module docstring)."""
    sent, size = await read_json(request)
    state = state_of(request)
    route = state.route(_model_named(sent), request.headers)
    model = route.model
    read, history = await read_request(state, api, model, sent, size)
    restored = await restore_state(state, read)
    observer = observer_of(request)
    observer.restored(restored, history.notes)
    req = restored.req
    observer.gateway(model.name, req, state.metrics)
    plan = await plan_upstream(state, model, restored, sent, route.key, size)
    headers, clamped = _clamp_note(plan, model, observer.request_id)
    observer.planned(plan)
    rerouted = plan.rerouted
    if rerouted is not None:
        route = route.sent_by(rerouted.kind)
    upstream = Upstream(route, observer.upstream_headers())
    observer.sending(upstream)
    await upstream.open(plan)
    observer.noted(clamped)  # once the upstream took the lowered max_tokens
    if rerouted is not None:
        headers[UPSTREAM_HEADER] = rerouted.header
    outcome = Outcome()
    observer.folding(outcome)
    events = fold(upstream, plan, outcome)
    remember = Remember(state.reasoning, restored.digests, sent, history.links)
    started = Answer(
        id=api.new_response_id(),
        created=int(time.time()),
        sign_thinking=partial(state.reasoning.signer.sign, model=req.model),
        sealer=state.keys,
    )

    if req.stream:
        usage = Usage(plan.prompt_tokens, 0) if plan.prompt_tokens is not None else None
        writer = api.open_stream(req, replace(started, usage=usage))
        return EventStream(
            _stream_body(state, writer, events, outcome, observer, remember),
            {"cache-control": "no-cache", "x-accel-buffering": "no", **headers},
            # runs after the last byte, after a disconnect, even if the body never started
            partial(_finish_upstream, upstream, observer),
        )

    whole = _whole_body(api, req, started, events, outcome, upstream, observer, remember)
    result = await _cancel_on_disconnect(request, whole, observer)
    if result is None:
        return Response(status_code=499)  # nobody is listening any more
    return Response(result, media_type="application/json", headers=headers)


async def _whole_body(
    api: ClientApi[Any],
    req: ChatRequest,
    started: Answer,
    events: AsyncGenerator[list[list[Event]], None],
    outcome: Outcome,
    upstream: Upstream,
    observer: RequestObserver,
    remember: Remember,
) -> bytes:
    """A non-streamed answer's body: fold's events collected into one message, the
    remember stage run, then the body written once."""
    collector = MessageCollector()
    try:
        async with aclosing(events) as batches:
            async for batch in batches:
                for part in batch:
                    collector.add(part)
    finally:
        _finish_upstream(upstream, observer)
    collector.add(outcome.closing)
    msg = collector.message()
    ended = replace(started, usage=outcome.usage, stop_sequence=outcome.stop_sequence)
    response = api.respond(msg, req.model, ended, req) if api.keeps_responses else None
    observer.remembered(await remember.answer(outcome.calls, response))
    observer.answer(response_diagnostics(msg, req))
    if response is None:
        return api.respond_json(msg, req.model, ended, req)
    return json_body(response)


# --- the stages the render routes share ------------------------------------------------


def resolve_model(state: ServerState, body: Any) -> ServedModel:
    """Stage 2 for the routes with no upstream: the served model a request body names
    (see :meth:`ServerState.model_for`)."""
    return state.model_for(_model_named(body))


def _model_named(body: Any) -> Any:
    """The ``model`` a request body names (the reader checks it later)."""
    return body.get("model") if isinstance(body, dict) else None


async def read_request(
    state: ServerState, api: ClientApi[Any], model: ServedModel, body: Any, size: int
) -> tuple[ChatRequest, History]:
    """Stage 3: the typed request (caller mistakes raise ``InvalidRequest`` at once), and
    the stored history of a Responses request (its items read before the body's).
    Raises :class:`~.response_store.HistoryRefused` and
    :class:`~.response_store.HistoryUnavailable`."""
    history = NO_HISTORY
    if api.keeps_responses:
        history = await stored_history(state.reasoning, body)
    signatures = state.reasoning.signer
    items = history.items
    context = ReadContext(model.dialect, state.keys, state.render_cache, signatures, items)
    try:
        return await run_for_body(size, api.read, body, context), history
    except InvalidRequest as exc:
        unreadable = history.unreadable(exc)
        if unreadable is None:
            raise
        raise unreadable from exc


async def restore_state(state: ServerState, req: ChatRequest) -> Restored:
    """Stage 4: dropped reasoning and the model's own words put back on the typed
    request."""
    return await restore(state.reasoning, req)


async def plan_upstream(
    state: ServerState,
    model: ServedModel,
    restored: Restored,
    body: Any,
    key: str | None,
    size: int,
) -> UpstreamPlan:
    """Stage 5: what goes upstream, as the model's upstream kind plans it
    (:mod:`.upstream_kinds`)."""
    stage = PlanStage(
        state,
        model,
        restored.req,
        body,
        key,
        size,
        put_back=restored.put_back,
        call_ids=restored.call_ids,
    )
    return replace(await stage.plan(), tokenize_seconds=stage.waited)


# --- helpers of the stages ---------------------------------------------------------------


def _finish_upstream(upstream: Upstream, observer: RequestObserver) -> None:
    """Close the upstream requests; their figures go to the observer."""
    observer.upstream_finished(upstream.finish())


def _clamp_note(
    plan: UpstreamPlan, model: ServedModel, request_id: str
) -> tuple[dict[str, str], tuple[Note, ...]]:
    """The note on a ``max_tokens`` lowered to what the context leaves after the prompt
    (``--max-tokens-policy clamp``): the header for the answer, and a log line."""
    requested, sent = plan.req.max_tokens, plan.upstream_body.get("max_tokens")
    if requested is None or not isinstance(sent, int) or sent >= requested:
        return {}, ()
    fields = {
        "event": "max_tokens_clamped",
        "request": request_id,
        "requested": requested,
        "sent": sent,
        "prompt_tokens": plan.prompt_tokens,
        "max_model_len": model.max_model_len,
    }
    return {CLAMPED_HEADER: str(sent)}, (Note(f"max_tokens {requested} clamped to {sent}", fields),)


async def _stream_body(
    state: ServerState,
    writer: StreamWriter,
    events: AsyncGenerator[list[list[Event]], None],
    outcome: Outcome,
    observer: RequestObserver,
    remember: Remember,
) -> AsyncGenerator[str, None]:
    """The SSE body: frames as events arrive; an error event if the upstream fails or the
    server stops before the stream ends. What the model wrote (and a finished Responses
    ``response``) is remembered before the last frames go out."""
    scope = state.open_stream_scope()
    try:
        yield "".join(writer.start_sse())
        with scope:
            async with aclosing(events) as batches:
                async for batch in batches:
                    # one write per read of the upstream body, one feed per upstream choice
                    written = "".join([frame for part in batch for frame in writer.feed_sse(part)])
                    if written:
                        yield written
        if scope.cancelled_caught:
            err = ApiError.for_status(503, "the server is shutting down; the answer was cut off")
            observer.failed("shutdown", err.message)
            yield LastText("".join(writer.error_sse(err, observer.request_id)))
            return
        closing = "".join(writer.feed_sse(outcome.closing))
        finished = writer.finish_sse(outcome.usage, outcome.stop_sequence)
        observer.remembered(await remember.answer(outcome.calls, writer.response))
        observer.answer(writer.diagnostics)
        if closing:
            yield closing
        yield LastText("".join(finished))
    except UpstreamError as exc:
        err = upstream_api_error(exc)
        observer.failed(err.type, err.message)
        yield LastText("".join(writer.error_sse(err, observer.request_id)))
    except anyio.get_cancelled_exc_class():
        observer.failed(*_DISCONNECTED)
        raise
    except Exception as exc:  # a bug must still end the stream with an error event
        LOGGER.exception("request %s: streaming failed", observer.request_id)
        err = ApiError.for_status(500, f"internal error: {type(exc).__name__}")
        observer.failed(err.type, str(exc))
        yield LastText("".join(writer.error_sse(err, observer.request_id)))
    finally:
        state.close_stream_scope(scope)


async def _cancel_on_disconnect(
    request: Request, work: Coroutine[Any, Any, T], observer: RequestObserver
) -> T | None:
    """Run ``work``; if the client disconnects first, cancel it and return None."""
    async with CancelOnDisconnect(request.receive):
        return await work
    observer.failed(*_DISCONNECTED)  # reached only when the watch cancelled the work
    return None
