"""The gateway: ``POST /v1/chat/completions`` and ``POST /v1/messages`` through an upstream.

``--upstream-api completions``: the request is rendered here and the prompt (token ids when
a tokenizer is loaded) goes to the engine's ``/v1/completions``; the raw text that streams
back is fed into one parser per request. ``--upstream-api chat``: the request goes to a
hosted ``/v1/chat/completions`` as chat, its ``tool_calls`` pass through and DSML leaked
into ``content`` / ``reasoning_content`` is repaired into calls (:mod:`.chat_repair`).

Either way the upstream is always read as a stream, turned into parser events, and answered
through the API adapters, streamed or collected. Upstream failures become errors in the
client's API shape: a status before the stream starts, an error event after.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dsmlkit.api import (
    ChatRequest,
    Usage,
    call_id_factory,
    parse_request,
    response_diagnostics,
    to_openai_chat_body,
)
from dsmlkit.api.common import Api
from dsmlkit.errors import ApiError, UpstreamError
from dsmlkit.parse import Diagnostic, Event, MessageCollector, OutputEnd
from dsmlkit.server.apis import (
    StreamFrames,
    build_response,
    new_response_id,
    stream_frames,
)
from dsmlkit.server.chat_repair import ChatRepair
from dsmlkit.server.event_stream import EventStream
from dsmlkit.server.forced import (
    HELD_BACK,
    CallGate,
    CompletionsAnswer,
    Resume,
    chat_fallback_body,
    cut_ending,
    missing_call,
)
from dsmlkit.server.local_routes import read_json
from dsmlkit.server.model_turns import Conversation
from dsmlkit.server.offload import run_for_body
from dsmlkit.server.prepare import model_of, prepare, prompt_length, restore_history
from dsmlkit.server.reasoning_store import AnswerTracker, ReasoningMemory
from dsmlkit.server.reqlog import RequestRecord, log_event
from dsmlkit.server.response_store import save
from dsmlkit.server.state import ServedModel, ServerState, client_keys, record_of, state_of
from dsmlkit.server.state_store import StateStoreUnavailable
from dsmlkit.server.upstream import UpstreamClient, UpstreamStream

LOGGER = logging.getLogger("dsmlkit.server")
T = TypeVar("T")

router = APIRouter()

#: Engine finish reasons that mean the output did not end normally.
_ABORTED = ("abort", "error")
#: How a request that lost its client is recorded (error type, message).
_DISCONNECTED = ("client_disconnected", "the client went away; the upstream request was closed")
#: Answers whose ``max_tokens`` was lowered to fit the context say so, with the value sent.
CLAMPED_HEADER = "x-dsmlkit-max-tokens-clamped"


def upstream_api_error(exc: UpstreamError) -> ApiError:
    """The client-facing error for an upstream failure.

    An upstream 4xx before the stream starts is the request's problem and keeps its status
    (422 → 400); a timeout is 504; anything else (connection, 5xx, the upstream refusing the
    gateway's own key, an error reported mid-stream, a broken or malformed stream) is 502.
    """
    if exc.kind == "timeout":
        return ApiError.for_status(504, exc.message)
    if exc.kind == "status" and exc.status is not None and 400 <= exc.status < 500:
        return ApiError.for_status(400 if exc.status == 422 else exc.status, exc.message)
    return ApiError.for_status(502, exc.message)


@dataclass
class _Outcome:
    """What the upstream reported besides text: usage and a matched stop string."""

    usage: Usage | None = None
    stop_sequence: str | None = None


@dataclass(frozen=True)
class _Plan:
    """One gateway request, ready to send: the request, the upstream body, how to fold the
    upstream's choices into events, and the usage known before sending.

    Forced calls (:mod:`.forced`): ``opening`` are events of text the gateway wrote into the
    answer itself; ``resume`` says after each upstream stream what follows (events, and
    the next upstream body or None); ``fallback_body`` is retried once when the upstream
    answers 400 (``fell_back``: it was). What reaches the client passes a
    :class:`~.forced.CallGate` in every mode.
    """

    req: ChatRequest
    upstream_body: dict[str, Any]
    feed: Callable[[Mapping[str, Any]], list[Event]]
    close: Callable[[str], list[Event]]
    prompt_tokens: int | None
    opening: list[Event] = field(default_factory=list)
    resume: Resume | None = None
    fallback_body: dict[str, Any] | None = None
    fell_back: bool = False


class _Upstream:
    """The upstream requests of one answer, one open at a time (a forced call in thinking
    mode takes two)."""

    def __init__(
        self, client: UpstreamClient, endpoint: str, key: _Key, stream: UpstreamStream
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._key = key
        self.stream = stream
        self._earlier: list[UpstreamStream] = []

    async def follow(self, body: dict[str, Any]) -> None:
        """Close the current request and open the next."""
        await self.stream.aclose()
        self._earlier.append(self.stream)
        self.stream = await _send(self._client, self._endpoint, self._key, body)

    @property
    def streams(self) -> list[UpstreamStream]:
        """Every request of the answer so far, the open one last."""
        return [*self._earlier, self.stream]

    async def aclose(self) -> None:
        await self.stream.aclose()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _gateway(request, "openai")


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    return await _gateway(request, "anthropic")


@router.post("/v1/responses")
async def responses(request: Request) -> Response:
    return await _gateway(request, "responses")


async def _gateway(request: Request, api: Api) -> Response:
    state = state_of(request)
    record = record_of(request)
    sent = await read_json(request)
    restored = await restore_history(state, api, sent)
    body, record.history_changed = restored.body, restored.changed
    record.reasoning_restored, record.state_error = restored.reasoning, restored.error
    model = model_of(state, body)
    endpoint = state.endpoint(model)
    key = _upstream_key(state, request)
    if model.config.upstream_api == "completions":
        plan = await _completions_plan(state, model, api, body, key[0], record)
    else:
        plan = await run_for_body(record.body_bytes, _chat_plan, state, model, api, body)
    req = plan.req
    record.stream, record.model, record.parsed = req.stream, model.name, True
    record.prompt_tokens = plan.prompt_tokens
    upstream = state.upstream()
    stream, plan = await _open(upstream, endpoint, key, plan, record)
    notes = _clamp_note(plan, model, record)
    calls = _Upstream(upstream, endpoint, key, stream)
    outcome = _Outcome()
    events = _events(calls, plan, record, outcome, state.reasoning, restored.conversation)
    response_id = new_response_id(api)
    created = int(time.time())
    sign_thinking = partial(state.reasoning.signer.sign, model=req.model)

    async def keep(response: dict[str, Any]) -> None:
        """Store a Responses answer's turn (a store failure is logged, not fatal)."""
        try:
            await save(state.reasoning, sent, response, restored.links)
        except StateStoreUnavailable as exc:
            record.state_error = exc.message

    if req.stream:
        prompt_usage = Usage(plan.prompt_tokens, 0) if plan.prompt_tokens is not None else None
        frames = stream_frames(
            req,
            response_id=response_id,
            created=created,
            prompt_usage=prompt_usage,
            sign_thinking=sign_thinking,
            sealer=state.keys,
        )
        return EventStream(
            _stream_body(state, frames, events, outcome, record, keep),
            {"cache-control": "no-cache", "x-accel-buffering": "no", **notes},
            # runs after the last byte, after a disconnect, even if the body never started
            partial(_finish_upstream, calls, record),
        )

    async def collect() -> dict[str, Any]:
        collector = MessageCollector()
        try:
            async with aclosing(events) as batches:
                async for batch in batches:
                    for part in batch:
                        collector.add(part)
        finally:
            await _finish_upstream(calls, record)
        msg = collector.message()
        record.diagnostics |= _kinds(response_diagnostics(msg, req))  # see _kinds
        return build_response(
            msg,
            req.api,
            req.model,
            response_id=response_id,
            created=created,
            usage=outcome.usage,
            stop_sequence=outcome.stop_sequence,
            sign_thinking=sign_thinking,
            request=req,
            sealer=state.keys,
        )

    result = await _cancel_on_disconnect(request, collect, record)
    if result is None:
        return Response(status_code=499)  # nobody is listening any more
    if api == "responses":
        await keep(result)
    return JSONResponse(result, headers=notes)


def _clamp_note(plan: _Plan, model: ServedModel, record: RequestRecord) -> dict[str, str]:
    """The note on a ``max_tokens`` lowered to what the context leaves after the prompt
    (``--max-tokens-policy clamp``): a log line, and the header for the answer."""
    requested, sent = plan.req.max_tokens, plan.upstream_body.get("max_tokens")
    if requested is None or not isinstance(sent, int) or sent >= requested:
        return {}
    note = {
        "event": "max_tokens_clamped",
        "request": record.id,
        "requested": requested,
        "sent": sent,
        "prompt_tokens": plan.prompt_tokens,
        "max_model_len": model.max_model_len,
    }
    log_event(LOGGER, logging.WARNING, f"max_tokens {requested} clamped to {sent}", note)
    return {CLAMPED_HEADER: str(sent)}


async def _completions_plan(
    state: ServerState,
    model: ServedModel,
    api: Api,
    body: Any,
    key: str | None,
    record: RequestRecord,
) -> _Plan:
    prepared = await run_for_body(record.body_bytes, prepare, state, api, body)
    req = prepared.req
    prompt: list[int] | str = (
        prepared.token_ids if prepared.token_ids is not None else prepared.encoded.text
    )
    asked = time.perf_counter()
    prompt_tokens = await prompt_length(state, prepared, key)
    record.upstream_wait = time.perf_counter() - asked  # the engine's /tokenize count
    first_prompt = prompt

    def make_body(prompt: list[int] | str, extra_stop: Sequence[str]) -> dict[str, Any]:
        # a later request of the answer (a forced call's second) extends the prompt the
        # client's max_tokens was checked against: it is fitted to the context, not refused
        later = True if prompt is not first_prompt else None
        upstream_body: dict[str, Any] = {
            "model": model.engine_model,
            "prompt": prompt,
            **prepared.sampling_params(
                _length_of(prompt, first_prompt, prompt_tokens), clamp=later
            ),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        upstream_body["stop"] = [*upstream_body["stop"], *extra_stop]
        if isinstance(prompt, str):
            upstream_body["add_special_tokens"] = False  # the prompt already starts with BOS
        return upstream_body

    tokenizer = model.tokenizer if prepared.token_ids is not None else None
    answer = CompletionsAnswer(req, prompt, prepared.result, tokenizer, make_body)

    def feed(choice: Mapping[str, Any]) -> list[Event]:
        text = choice.get("text")
        return answer.feed(text) if isinstance(text, str) and text else []

    return _Plan(
        req,
        answer.body,
        feed,
        answer.parser.close,
        prompt_tokens,
        opening=answer.opening,
        resume=answer.resume,
    )


def _length_of(
    prompt: list[int] | str, first: list[int] | str, first_tokens: int | None
) -> int | None:
    """The length in tokens of an upstream prompt that extends the first one: exact for
    ids; for text at most the first prompt's tokens plus one per byte added."""
    if isinstance(prompt, list):
        return len(prompt)
    if first_tokens is None or not isinstance(first, str):
        return None
    return first_tokens + len(prompt[len(first) :].encode())


def _chat_plan(state: ServerState, model: ServedModel, api: Api, body: Any) -> _Plan:
    req = parse_request(
        api, body, dialect=model.dialect, sealer=state.keys, cache=state.render_cache
    )
    upstream_body = dict(body) if api == "openai" else to_openai_chat_body(req)
    upstream_body.update(stream=True, stream_options={"include_usage": True})
    if model.engine_model is not None:
        upstream_body["model"] = model.engine_model
    repair = ChatRepair(lambda: req.new_parser("content"), call_id_factory(req.api))

    def feed(choice: Mapping[str, Any]) -> list[Event]:
        delta = choice.get("delta")
        return repair.feed(delta) if isinstance(delta, Mapping) else []

    return _Plan(
        req,
        upstream_body,
        feed,
        repair.close,
        None,
        fallback_body=chat_fallback_body(req, upstream_body),
    )


#: The key sent upstream, and whether it is the client's own (forwarded).
_Key = tuple[str | None, bool]


async def _send(
    upstream: UpstreamClient, endpoint: str, key: _Key, body: dict[str, Any]
) -> UpstreamStream:
    return await upstream.open_stream(endpoint, body, key[0], clients_key=key[1])


async def _open(
    upstream: UpstreamClient, endpoint: str, key: _Key, plan: _Plan, record: RequestRecord
) -> tuple[UpstreamStream, _Plan]:
    """Open the first upstream request; a 400 to a forced choice retries the fallback."""
    try:
        return await _send(upstream, endpoint, key, plan.upstream_body), plan
    except UpstreamError as exc:
        if plan.fallback_body is None or exc.status != 400:
            raise
        record.diagnostics["tool_choice_fallback"] += 1
        stream = await _send(upstream, endpoint, key, plan.fallback_body)
        return stream, replace(plan, fell_back=True)


def _upstream_key(state: ServerState, request: Request) -> _Key:
    """The upstream's own key if configured; else, on an open server, the client's key
    (and whether it is the client's)."""
    if state.config.upstream_api_key is not None or state.config.api_key is not None:
        return state.config.upstream_api_key, False
    offered = client_keys(request.headers)
    return (offered[0], True) if offered else (None, False)


async def _events(
    upstream: _Upstream,
    plan: _Plan,
    record: RequestRecord,
    outcome: _Outcome,
    memory: ReasoningMemory,
    conversation: Conversation,
) -> AsyncGenerator[list[list[Event]], None]:
    """Parser events for the upstream's streams, ending with the close() events; what the
    model wrote is remembered under its call ids (in ``conversation``) before the last
    events go out.

    Yields batches: the event lists (one per upstream choice that made any) of one read of
    the upstream body, so that what arrived together is written together; each list stays
    one ``frames.feed`` call, so the bytes do not depend on how reads fall.
    """
    answer = AnswerTracker()
    gate = CallGate(plan.req)
    opening = gate.feed(plan.opening)[0]
    if opening:
        answer.add(opening)
        yield [_noted(record, opening)]
    spent = 0  # completion tokens of earlier upstream requests of this answer
    while True:
        finish: str | None = None
        stop_reason: str | None = None
        cut = False
        async for chunks in upstream.stream.batches():
            batch: list[list[Event]] = []
            for chunk in chunks:
                usage = chunk.get("usage")
                if isinstance(usage, Mapping):
                    outcome.usage = _added_usage(outcome.usage, _usage(usage), spent)
                for choice in chunk.get("choices") or ():
                    events, cut = gate.feed(_timed(record, plan.feed, choice))
                    if events:
                        answer.add(events)
                        batch.append(_noted(record, events))
                    if cut:
                        break
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
                        said = choice.get("stop_reason")
                        stop_reason = said if isinstance(said, str) else None
                if cut:
                    break
            if batch:
                yield batch
            if cut:
                break
        if cut:
            final = _noted(record, cut_ending())
            break
        if finish is None or finish in _ABORTED:
            said = "" if finish is None else f" (finish_reason {finish!r})"
            raise UpstreamError("broken", f"the upstream stream ended before the output did{said}")
        if stop_reason in plan.req.stop_sequences:
            outcome.stop_sequence = stop_reason
        spent = outcome.usage.completion_tokens if outcome.usage is not None else spent
        follow = plan.resume(finish, stop_reason, spent) if plan.resume else ([], None)
        more = gate.feed(follow[0])[0]
        if more:
            answer.add(more)
            yield [_noted(record, more)]
        if follow[1] is None:
            closing, cut = gate.feed(_timed(record, plan.close, finish))
            final = _noted(record, closing + cut_ending() if cut else closing)
            break
        await upstream.follow(follow[1])
    if outcome.usage is None:
        outcome.usage = Usage(plan.prompt_tokens or 0, 0)
    answer.add(final)
    record.finish_reason = next(e.finish_reason for e in final if isinstance(e, OutputEnd))
    refused = missing_call(plan.req, gate, record.finish_reason, plan.fell_back)
    if refused is not None:
        raise UpstreamError("broken", refused)
    record.prompt_tokens = outcome.usage.prompt_tokens
    record.completion_tokens = outcome.usage.completion_tokens
    record.state_error = await memory.remember(answer, conversation) or record.state_error
    yield [final]


async def _stream_body(
    state: ServerState,
    frames: StreamFrames,
    events: AsyncGenerator[list[list[Event]], None],
    outcome: _Outcome,
    record: RequestRecord,
    keep: Callable[[dict[str, Any]], Awaitable[None]],
) -> AsyncGenerator[str, None]:
    """The SSE body: frames as events arrive; an error event if the upstream fails or the
    server stops before the stream ends. A finished Responses ``response`` is kept
    (``keep``) before its last event goes out."""
    scope = state.open_stream_scope()
    try:
        yield "".join(frames.start())
        with scope:
            async with aclosing(events) as batches:
                async for batch in batches:
                    # one write per read of the upstream body, one feed per upstream choice
                    written = "".join([frame for part in batch for frame in frames.feed(part)])
                    if written:
                        yield written
        if scope.cancelled_caught:
            err = ApiError.for_status(503, "the server is shutting down; the answer was cut off")
            record.fail("shutdown", err.message)
            yield "".join(frames.fail(err, record.id))
            return
        finished = frames.finish(outcome.usage, outcome.stop_sequence)
        if frames.response is not None:
            await keep(frames.response)
        yield "".join(finished)
        record.diagnostics |= _kinds(frames.diagnostics)  # see _kinds
    except UpstreamError as exc:
        err = upstream_api_error(exc)
        record.fail(err.type, err.message)
        yield "".join(frames.fail(err, record.id))
    except anyio.get_cancelled_exc_class():
        record.fail(*_DISCONNECTED)
        raise
    except Exception as exc:  # a bug must still end the stream with an error event
        LOGGER.exception("request %s: streaming failed", record.id)
        err = ApiError.for_status(500, f"internal error: {type(exc).__name__}")
        record.fail(err.type, str(exc))
        yield "".join(frames.fail(err, record.id))
    finally:
        state.close_stream_scope(scope)


async def _finish_upstream(upstream: _Upstream, record: RequestRecord) -> None:
    await upstream.aclose()
    streams = upstream.streams
    record.upstream_seconds = sum(stream.seconds for stream in streams)
    record.upstream_wait = (record.upstream_wait or 0.0) + sum(s.waited for s in streams)
    record.chunk_overheads = [gap for stream in streams for gap in stream.gaps]


async def _cancel_on_disconnect(
    request: Request, work: Callable[[], Awaitable[T]], record: RequestRecord
) -> T | None:
    """Run ``work``; if the client disconnects first, cancel it and return None."""
    results: list[T] = []
    failures: list[Exception] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            record.fail(*_DISCONNECTED)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            results.append(await work())
        except Exception as exc:  # re-raised below, outside the task group
            failures.append(exc)
        group.cancel_scope.cancel()
    if failures:
        raise failures[0]
    return results[0] if results else None


def _timed(record: RequestRecord, step: Callable[[Any], list[Event]], arg: Any) -> list[Event]:
    started = time.perf_counter()
    try:
        return step(arg)
    finally:
        record.parse_seconds += time.perf_counter() - started


def _noted(record: RequestRecord, events: list[Event]) -> list[Event]:
    """Count diagnostics as they pass (what a failed stream still logs); a call held back
    from the client gets a log line of its own, with its arguments."""
    for event in events:
        if isinstance(event, Diagnostic):
            record.diagnostics[event.kind] += 1
            if event.kind == HELD_BACK:
                held = {"event": HELD_BACK, "request": record.id, "message": event.message}
                log_event(LOGGER, logging.WARNING, event.message, {**held, "arguments": event.text})
    return events


def _kinds(diagnostics: tuple[Diagnostic, ...]) -> Counter[str]:
    """The kinds of an answer's final diagnostics: its events' (which :func:`_noted`
    counted already, so they are merged by maximum, not added) and tool_choice's report.
    Counts kept only on the record (``tool_choice_fallback``) stay."""
    return Counter(d.kind for d in diagnostics)


def _added_usage(before: Usage | None, stage: Usage, spent: int) -> Usage:
    """An answer's usage: the first request's prompt, the completions of all requests."""
    if before is None:
        return stage
    return Usage(before.prompt_tokens, spent + stage.completion_tokens, before.cached_tokens)


def _usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None

    def count(value: Any) -> int:
        return value if isinstance(value, int) and value >= 0 else 0

    return Usage(
        count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), count(cached)
    )
