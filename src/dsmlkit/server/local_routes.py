"""Routes that need no upstream: health, models, metrics, render, tokenize, parse."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dsmlkit.api import (
    CHAT,
    MESSAGES,
    RESPONSES,
    Answer,
    ChatRequest,
    ClientApi,
    ParseOptions,
    api_named,
    parse_options,
)
from dsmlkit.dialects import BOS
from dsmlkit.errors import InvalidRequest
from dsmlkit.parse import MessageCollector, ParsedMessage, event_to_json
from dsmlkit.render import RenderResult
from dsmlkit.render.tokens import PromptTokenizer
from dsmlkit.server.jsonbody import read_json
from dsmlkit.server.metrics import CONTENT_TYPE
from dsmlkit.server.observer import observer_of
from dsmlkit.server.offload import run_for_body
from dsmlkit.server.pipeline import read_request, resolve_model, restore_state
from dsmlkit.server.plan import (
    image_count,
    image_route_note,
    prompt_length,
    render_prompt,
    with_images,
)
from dsmlkit.server.state import ServedModel, ServerState, state_of
from dsmlkit.server.upstream_kinds import Prompt

router = APIRouter()

#: On a count that leaves out images of unknown size (``http(s)`` URLs: each counted as its
#: placeholder token alone, so the count is a lower bound): how many.
UNCOUNTED_IMAGES_HEADER = "x-dsmlkit-uncounted-images"

#: Anthropic requires max_tokens on /v1/messages but not on count_tokens.
_COUNT_TOKENS_MAX_TOKENS = 1


#: What the render routes show in place of reasoning the client was not shown: reasoning
#: that came sealed (the client that sends a token need not be the one that was shown its
#: text) and reasoning restored for an answer that did not show it (``display: "omitted"``).
SEALED_MARKER = "[sealed reasoning]"


async def _object(request: Request) -> tuple[dict[str, Any], int]:
    """The body of a route that takes a JSON object, and its size."""
    body, size = await read_json(request)
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body, size


async def _prompt(
    state: ServerState, model: ServedModel, api: ClientApi[Any], body: Any, size: int
) -> Prompt:
    """The pipeline's typed request and plan stages for a body with no state to restore."""
    req, _ = await read_request(state, api, model, body, size)
    return await run_for_body(size, render_prompt, state, model, req)


@router.api_route("/health", methods=["GET", "HEAD"])
async def health() -> dict[str, str]:
    """Alive: the process answers (no upstream is asked)."""
    return {"status": "ok"}


@router.api_route("/ready", methods=["GET", "HEAD"])
async def ready(request: Request) -> JSONResponse:
    """Each model's engine read now: 200 when every one answers as configured, else 503.

    The state store is reported (``state``) but does not decide the status: a store outage
    degrades the reasoning round trip only, so it must not take every replica out of rotation.
    """
    state = state_of(request)
    await state.read_engines()
    models = {}
    for model in state.models:
        problems = model.problems()
        facts = model.engine.facts
        models[model.name] = {
            "ready": not problems,
            "upstream": model.config.shown_endpoint,
            "engine_model": model.engine_model,
            "max_model_len": model.max_model_len,
            "served": list(facts.served) if facts is not None else None,
            "prompts": model.plan.summary,
            "problems": problems,
        }
    ok = all(entry["ready"] for entry in models.values())
    return JSONResponse(
        {
            "status": "ready" if ok else "not ready",
            "models": models,
            "state": (await state.reasoning.store.check()).as_json(),
        },
        status_code=200 if ok else 503,
    )


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    state = state_of(request)
    cards = [
        {
            "id": name,
            "object": "model",
            "created": state.started,
            "owned_by": "dsmlkit",
            "root": model.engine_model or model.name,
            "max_model_len": model.max_model_len,
        }
        for model in state.models
        for name in model.config.names
    ]
    return {"object": "list", "data": cards}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE)


@router.post(CHAT.render_path)
async def render_chat(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, CHAT))


@router.post(MESSAGES.render_path)
async def render_messages(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, MESSAGES))


@router.post(RESPONSES.render_path)
async def render_responses(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, RESPONSES))


async def _render(request: Request, api: ClientApi[Any]) -> dict[str, Any]:
    """vLLM's render response (``request_id``, ``token_ids``, ``sampling_params``, ``model``,
    ``stream``) plus the prompt text (exactly as it goes upstream, history and restored
    reasoning included), its length and what dsmlkit knows about it.

    Reasoning the client was not shown (``reasoning_sealed``: it came sealed, or was
    restored for an answer that omitted it) is never shown: the prompt holds
    :data:`SEALED_MARKER` in its place and ``token_ids`` is null (they would spell it out);
    ``prompt_tokens`` still counts the real prompt.

    ``prompt_tokens`` counts each image's span as the engine expands it (``images``: how
    many, the tokens their spans take, the paths of those whose size is unknown here, for
    which ``prompt_tokens`` is null).
    """
    state, observer = state_of(request), observer_of(request)
    sent, size = await read_json(request)
    model = resolve_model(state, sent)
    observer.model(model.name)
    read, history = await read_request(state, api, model, sent, size)
    restored = await restore_state(state, read)
    observer.restored(restored, history.notes)
    req = restored.req
    prepared = await run_for_body(size, render_prompt, state, model, req)
    result = prepared.result
    notes = prepared.notes
    betas = request.headers.get(api.beta_header) if api.beta_header else None
    if betas:
        notes.append(f"{api.beta_header} ({betas}): accepted; changes nothing in the prompt")
    ids = prepared.token_ids
    images = await run_for_body(size, image_count, req)
    prompt_tokens = with_images(None if ids is None else len(ids), images)
    if prompt_tokens is not None:
        observer.prompt(prompt_tokens)
    if images.images and not model.kind.carries_images:
        notes.append(image_route_note(state, model))
    shown, shown_ids = prepared, ids
    sealed = [m.param for m in req.conversation.messages if m.reasoning_sealed]
    if sealed:
        shown = await run_for_body(size, render_prompt, state, model, _redacted(req))
        shown_ids = None
        notes.append(
            f"reasoning the client was not shown (sealed or omitted) is shown as "
            f"{SEALED_MARKER!r} ({', '.join(sealed)}) and token_ids are left out; the "
            "engine gets the reasoning itself, which prompt_tokens counts"
        )
    return {
        "request_id": api.new_response_id(),
        "model": req.model,
        "prompt": shown.encoded.text,
        "token_ids": shown_ids,
        "prompt_tokens": prompt_tokens,
        "images": images.as_json() if images.images else None,
        "output_starts_in": result.output_starts_in,
        "dialect": result.dialect,
        "sampling_params": prepared.sampling_params(),
        "stream": req.stream,
        "tokenizer": model.tokenizer.name if model.tokenizer is not None else None,
        "special_spans": _special_spans(shown.result, shown.encoded.text),
        "notes": notes,
    }


def _special_spans(result: RenderResult, prompt: str) -> list[list[int]] | None:
    """``[start, end]`` character offsets of the template's special tokens in ``prompt``;
    None when the prompt sent differs from the one rendered (tokens defused as text)."""
    if prompt != result.prompt:
        return None
    spans: list[list[int]] = []
    offset = 0
    for text, special in result.pieces:
        if special:
            spans.append([offset, offset + len(text)])
        offset += len(text)
    return spans


def _redacted(req: ChatRequest) -> ChatRequest:
    """``req`` with the reasoning the client was not shown replaced by :data:`SEALED_MARKER`."""
    messages = tuple(
        replace(m, reasoning=SEALED_MARKER) if m.reasoning_sealed else m
        for m in req.conversation.messages
    )
    return replace(req, conversation=replace(req.conversation, messages=messages))


@router.post("/tokenize")
async def tokenize(request: Request) -> JSONResponse:
    """vLLM's tokenize: ``{"prompt"}`` (added tokens matched, BOS first unless
    ``add_special_tokens`` is false) or a chat body (``{"messages", …}``, rendered)."""
    state = state_of(request)
    body, size = await _object(request)
    model = resolve_model(state, body)
    tokenizer = model.require_tokenizer()
    if "messages" in body:
        prepared = await _prompt(state, model, CHAT, {"model": model.name, **body}, size)
        ids = prepared.token_ids
        if ids is None:
            raise InvalidRequest(
                "this prompt has no token ids here: " + "; ".join(prepared.encoded.notes),
                "messages",
            )
    elif isinstance(body.get("prompt"), str):
        ids = await anyio.to_thread.run_sync(_encode_prompt_text, tokenizer, body)
    else:
        raise InvalidRequest("give either a string prompt or chat messages", "prompt")
    response: dict[str, Any] = {
        "count": len(ids),
        "max_model_len": model.max_model_len,
        "tokens": ids,
    }
    if body.get("return_token_strs"):
        response["token_strs"] = [tokenizer.decode([token]) for token in ids]
    return JSONResponse(response)


def _encode_prompt_text(tokenizer: PromptTokenizer, body: dict[str, Any]) -> list[int]:
    ids = tokenizer.encode_text(body["prompt"], special=True)
    bos = tokenizer.token_id(BOS)
    if body.get("add_special_tokens", True) and bos is not None and ids[:1] != [bos]:
        ids.insert(0, bos)
    return ids


@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, str]:
    state = state_of(request)
    body, _ = await _object(request)
    tokenizer = resolve_model(state, body).require_tokenizer()
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(token, int) and not isinstance(token, bool) and token >= 0 for token in tokens
    ):
        raise InvalidRequest("must be a list of token ids (integers)", "tokens")
    size = tokenizer.vocab_size
    for index, token in enumerate(tokens):
        if token >= size:
            raise InvalidRequest(
                f"token id {token} is not in the tokenizer (its ids are 0 to {size - 1})",
                f"tokens[{index}]",
            )
    return {"prompt": tokenizer.decode(tokens)}


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> JSONResponse:
    """The length of the prompt ``/v1/messages`` would send (reasoning restored from the
    store included): its ids, else the engine's count of the text prompt, else the loaded
    tokenizer's count of the text (approximate when it lacks a template token)."""
    state, observer = state_of(request), observer_of(request)
    body, size = await _object(request)
    model = resolve_model(state, body)
    facts = model.engine.facts
    if model.tokenizer is None and (facts is None or facts.token_ids is None):
        model.require_tokenizer()  # the 501
    full = {"max_tokens": _COUNT_TOKENS_MAX_TOKENS, **body}
    read, history = await read_request(state, MESSAGES, model, full, size)
    restored = await restore_state(state, read)
    observer.restored(restored, history.notes)
    req = restored.req
    prepared = await run_for_body(size, render_prompt, state, model, req)
    images = await run_for_body(size, image_count, req)
    count = await prompt_length(state, model, prepared, state.upstream_key)
    if count is None:
        tokenizer = model.require_tokenizer()
        text = prepared.encoded.text
        count = len(await anyio.to_thread.run_sync(tokenizer.encode_text, text, True))
    count += images.extra
    observer.prompt(count)
    usage = {"input_tokens": count, "context_management": {"original_input_tokens": count}}
    headers = {UNCOUNTED_IMAGES_HEADER: str(len(images.uncounted))} if images.uncounted else None
    return JSONResponse(usage, headers=headers)


@router.post("/v1/parse")
async def parse_output(request: Request) -> JSONResponse:
    """Raw model text → an OpenAI ``chat.completion`` (``"api": "chat"`` or ``"openai"``,
    default) or an Anthropic ``message`` (``"api": "messages"`` or ``"anthropic"``); the
    parser's findings are added as ``parse_diagnostics``.

    Body: ``text`` (required), ``api``, ``dialect`` (default: the server's), ``start_in``
    (``content`` default, or ``reasoning``), ``tools`` (in that API's format),
    ``finish_reason`` (the engine's, e.g. ``length``), ``model``, and ``chunk_size``: feed
    the text in deltas of that many characters and add the parser's events to the answer as
    ``stream`` (one ``{"delta", "events"}`` per delta, then the ``close()`` events under a
    null delta). The message is the same whatever the chunking.
    """
    state = state_of(request)
    body, _ = await _object(request)
    text = body.get("text")
    if not isinstance(text, str):
        raise InvalidRequest("must be the model's raw output text (a string)", "text")
    api = api_named(_choice(body, "api", _PARSE_APIS, CHAT.name))
    start_in = _choice(body, "start_in", ("content", "reasoning"), "content")
    finish = _choice(body, "finish_reason", ("stop", "length"), "stop")
    default = resolve_model(state, body)
    dialect = body.get("dialect") or default.dialect
    if not isinstance(dialect, str):
        raise InvalidRequest("must be a dialect name (a string)", "dialect")
    model = body.get("model") or default.name
    if not isinstance(model, str):
        raise InvalidRequest("must be a string", "model")
    chunk_size = _chunk_size(body.get("chunk_size"), len(text), state.config.parse_max_deltas)
    options = parse_options(api, body.get("tools"), dialect=dialect)
    observer = observer_of(request)
    observer.model(model)
    started = time.perf_counter()
    msg, stream = await anyio.to_thread.run_sync(
        _parse_text, options, api, start_in, text, finish, chunk_size
    )
    observer.parsed(msg, time.perf_counter() - started)
    diagnostics = msg.diagnostics  # no tool_choice to check: the text is all there is
    answer = Answer(api.new_response_id(), int(time.time()))
    response = api.respond(msg, model, answer, None)
    response["parse_diagnostics"] = [
        {"kind": d.kind, "message": d.message, "text": d.text} for d in diagnostics
    ]
    if stream is not None:
        response["stream"] = stream
    return JSONResponse(response)


#: The APIs ``/v1/parse`` answers in, by every name (a Responses answer echoes a request,
#: which ``/v1/parse`` has not).
_PARSE_APIS = (*CHAT.aliases, *MESSAGES.aliases, CHAT.name, MESSAGES.name)


def _chunk_size(value: Any, length: int, max_deltas: int) -> int | None:
    """A ``/v1/parse`` body's ``chunk_size``: None, or a positive whole number that splits
    a text of ``length`` characters into at most ``max_deltas`` deltas (``--parse-max-deltas``:
    each delta's events cost memory, whatever the body's size)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest("must be a positive whole number of characters", "chunk_size")
    deltas = -(-length // value)
    if deltas > max_deltas:
        fits = -(-length // max_deltas)
        raise InvalidRequest(
            f"{value} splits the text ({length} characters) into {deltas} deltas; this "
            f"server answers at most {max_deltas} (--parse-max-deltas): use a chunk_size of "
            f"{fits} or more, or leave it out",
            "chunk_size",
        )
    return value


def _parse_text(
    options: ParseOptions,
    api: ClientApi[Any],
    start_in: Any,
    text: str,
    finish: str,
    chunk_size: int | None,
) -> tuple[ParsedMessage, list[dict[str, Any]] | None]:
    """The message, and with ``chunk_size`` the events each delta (then ``close()``) gave."""
    parser = options.parser(start_in, api.call_ids())
    collector = MessageCollector()
    if chunk_size is None:
        collector.add(parser.feed(text) + parser.close(finish))
        return collector.message(), None
    stream: list[dict[str, Any]] = []
    deltas: list[str | None] = [
        text[start : start + chunk_size] for start in range(0, len(text), chunk_size)
    ]
    for delta in [*deltas, None]:
        events = parser.close(finish) if delta is None else parser.feed(delta)
        collector.add(events)
        stream.append({"delta": delta, "events": [event_to_json(e) for e in events]})
    return collector.message(), stream


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if value not in allowed:
        raise InvalidRequest(f"must be one of {', '.join(allowed)}", name)
    return value
