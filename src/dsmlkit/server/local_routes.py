"""Routes that need no upstream: health, models, metrics, render, tokenize, parse."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from dsmlkit.api import call_id_factory, parse_options
from dsmlkit.api.common import Api
from dsmlkit.dialects import BOS
from dsmlkit.errors import InvalidRequest
from dsmlkit.parse import MessageCollector
from dsmlkit.server.apis import build_response, new_response_id
from dsmlkit.server.prepare import prepare
from dsmlkit.server.state import record_of, state_of

router = APIRouter()

#: Anthropic requires max_tokens on /v1/messages but not on count_tokens.
_COUNT_TOKENS_MAX_TOKENS = 1


async def read_json(request: Request) -> Any:
    """The request body as JSON; a 400 when it is not JSON."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    state = state_of(request)
    model = {
        "id": state.config.served_model,
        "object": "model",
        "created": state.started,
        "owned_by": "dsmlkit",
    }
    return {"object": "list", "data": [model]}


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    return PlainTextResponse(
        state_of(request).metrics.render(), media_type="text/plain; version=0.0.4"
    )


@router.post("/v1/chat/completions/render")
async def render_openai(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, "openai"))


@router.post("/v1/messages/render")
async def render_anthropic(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, "anthropic"))


@router.post("/v1/responses/render")
async def render_responses(request: Request) -> JSONResponse:
    return JSONResponse(await _render(request, "responses"))


async def _render(request: Request, api: Api) -> dict[str, Any]:
    """vLLM's render response (``request_id``, ``token_ids``, ``sampling_params``, ``model``,
    ``stream``) plus the prompt text and what dsmlkit knows about it."""
    state = state_of(request)
    prepared = prepare(state, api, await read_json(request))
    req, result = prepared.req, prepared.result
    record = record_of(request)
    record.model = req.model
    notes = list(result.notes)
    betas = request.headers.get("anthropic-beta")
    if api == "anthropic" and betas:
        notes.append(f"anthropic-beta ({betas}): accepted; changes nothing in the prompt")
    if prepared.token_ids is None:
        notes.append(f"token_ids is null: no tokenizer is loaded ({state.tokenizer_description})")
    else:
        record.prompt_tokens = len(prepared.token_ids)
    return {
        "request_id": new_response_id(api),
        "model": req.model,
        "prompt": result.prompt,
        "token_ids": prepared.token_ids,
        "output_starts_in": result.output_starts_in,
        "dialect": result.dialect,
        "sampling_params": prepared.sampling_params(),
        "stream": req.stream,
        "tokenizer": state.tokenizer.name if state.tokenizer is not None else None,
        "notes": notes,
    }


@router.post("/tokenize")
async def tokenize(request: Request) -> JSONResponse:
    """vLLM's tokenize: ``{"prompt"}`` (added tokens matched, BOS first unless
    ``add_special_tokens`` is false) or a chat body (``{"messages", …}``, rendered)."""
    state = state_of(request)
    tokenizer = state.require_tokenizer()
    body = _object(await read_json(request))
    if "messages" in body:
        chat_body = {"model": state.config.served_model, **body}
        ids = prepare(state, "openai", chat_body).token_ids or []
    elif isinstance(body.get("prompt"), str):
        ids = tokenizer.encode_text(body["prompt"], special=True)
        bos = tokenizer.token_id(BOS)
        if body.get("add_special_tokens", True) and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
    else:
        raise InvalidRequest("give either a string prompt or chat messages", "prompt")
    response: dict[str, Any] = {"count": len(ids), "max_model_len": None, "tokens": ids}
    if body.get("return_token_strs"):
        response["token_strs"] = [tokenizer.decode([token]) for token in ids]
    return JSONResponse(response)


@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, str]:
    tokenizer = state_of(request).require_tokenizer()
    tokens = _object(await read_json(request)).get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(token, int) and not isinstance(token, bool) and token >= 0 for token in tokens
    ):
        raise InvalidRequest("must be a list of token ids (integers)", "tokens")
    try:
        return {"prompt": tokenizer.decode(tokens)}
    except Exception as exc:  # the Rust side reports ids out of range as a plain Exception
        raise InvalidRequest(f"cannot decode these ids: {exc}", "tokens") from None


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> JSONResponse:
    state = state_of(request)
    state.require_tokenizer()
    body = _object(await read_json(request))
    prepared = prepare(state, "anthropic", {"max_tokens": _COUNT_TOKENS_MAX_TOKENS, **body})
    assert prepared.token_ids is not None  # a tokenizer is loaded
    count = len(prepared.token_ids)
    record_of(request).prompt_tokens = count
    usage = {"input_tokens": count, "context_management": {"original_input_tokens": count}}
    return JSONResponse(usage)


@router.post("/v1/parse")
async def parse_output(request: Request) -> JSONResponse:
    """Raw model text → an OpenAI ``chat.completion`` (``"api": "openai"``, default) or an
    Anthropic ``message`` (``"api": "anthropic"``); the parser's findings are added as
    ``parse_diagnostics``.

    Body: ``text`` (required), ``api``, ``dialect`` (default: the server's), ``start_in``
    (``content`` default, or ``reasoning``), ``tools`` (in that API's format),
    ``finish_reason`` (the engine's, e.g. ``length``) and ``model``.
    """
    state = state_of(request)
    body = _object(await read_json(request))
    text = body.get("text")
    if not isinstance(text, str):
        raise InvalidRequest("must be the model's raw output text (a string)", "text")
    api = _choice(body, "api", ("openai", "anthropic"), "openai")
    start_in = _choice(body, "start_in", ("content", "reasoning"), "content")
    finish = _choice(body, "finish_reason", ("stop", "length"), "stop")
    dialect = body.get("dialect") or state.config.dialect
    if not isinstance(dialect, str):
        raise InvalidRequest("must be a dialect name", "dialect")
    model = body.get("model") or state.config.served_model
    if not isinstance(model, str):
        raise InvalidRequest("must be a string", "model")
    options = parse_options(api, body.get("tools"), dialect=dialect)
    record = record_of(request)
    record.model = model
    parser = options.parser(start_in, call_id_factory(api))
    collector = MessageCollector()
    started = time.perf_counter()
    collector.add(parser.feed(text) + parser.close(finish))
    record.parse_seconds = time.perf_counter() - started
    record.parsed = True
    msg = collector.message()
    diagnostics = msg.diagnostics  # no tool_choice to check: the text is all there is
    record.diagnostics.update(d.kind for d in diagnostics)
    record.finish_reason = msg.finish_reason
    response = build_response(
        msg,
        api,
        model,
        response_id=new_response_id(api),
        created=int(time.time()),
        usage=None,
        stop_sequence=None,
    )
    response["parse_diagnostics"] = [
        {"kind": d.kind, "message": d.message, "text": d.text} for d in diagnostics
    ]
    return JSONResponse(response)


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if value not in allowed:
        raise InvalidRequest(f"must be one of {', '.join(allowed)}", name)
    return value
