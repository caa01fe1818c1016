"""The plan stage: a typed request → what goes upstream and how its answer is read back.

The served model's upstream kind (:mod:`.upstream_kinds`) makes the plan; this stage gives
it what only the server has (:class:`PlanStage`): the prompt rendered with the server's
cache and policy (:func:`render_prompt`, shared with the render routes, so what
``/v1/chat/completions/render`` returns is exactly what the engine gets) and the engine's
count of a text prompt (:func:`prompt_length`).

A request with images is planned here by the kind that carries them
(:meth:`~.upstream_kinds.UpstreamKind.image_kind`): behind ``--upstream-api completions``
the engine's chat endpoint, which renders that request itself (``--images route``), or a 400
naming the image (``--images refuse``). A dialect with no image token (V3.2) refuses
images whatever the kind. Image tokens are counted from each image's size
(:mod:`dsmlkit.render.images`) into the prompt's length.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from dsmlkit.api import ChatRequest
from dsmlkit.conversation.model import ImagePart
from dsmlkit.dialects import Vision
from dsmlkit.errors import InvalidRequest
from dsmlkit.render.images import ImageCount, conversation_images, count_images
from dsmlkit.render.renderer import no_image_token
from dsmlkit.server.offload import run_for_body
from dsmlkit.server.state import ServedModel, ServerState
from dsmlkit.server.upstream_kinds import Prompt, Reroute, UpstreamKind, UpstreamPlan

#: Why a request went to another route than its model's own: it carries images.
IMAGE_REASON = "image"


def render_prompt(state: ServerState, model: ServedModel, req: ChatRequest) -> Prompt:
    """Render and encode one typed request (CPU-bound: large ones run off the event loop);
    a tool the hosted endpoint runs (:mod:`dsmlkit.conversation.server_tools`) is refused,
    as no prompt can hold it."""
    if req.server_tools:
        raise req.server_tools[0].not_rendered()
    result = req.encoding.render(req.conversation, req.render, state.render_cache)
    clamp = state.config.max_tokens_policy == "clamp"
    encoded = model.plan.encode(result)
    return Prompt(
        req, result, encoded, model.engine_model, model.max_model_len, model.tokenizer, clamp
    )


def image_count(req: ChatRequest) -> ImageCount:
    """What the request's images add to its prompt, by its dialect's vision rules (a 400
    naming an image that cannot be read, or any image for a dialect with none)."""
    images = conversation_images(req.conversation)
    if not images:
        return ImageCount()
    return count_images(req.conversation, vision_of(req, images))


def vision_of(req: ChatRequest, images: Sequence[ImagePart]) -> Vision:
    """The vision rules of the request's dialect; a 400 naming the first of ``images`` for
    a dialect with no image token."""
    dialect = req.render.dialect
    if dialect.vision is None:
        raise no_image_token(dialect, images[0])
    return dialect.vision


def with_images(length: int | None, images: ImageCount) -> int | None:
    """A prompt's length counted with each image placeholder as one token, with the images'
    spans in their place (None: unknown, as is a count with an image of unknown size)."""
    if length is None or images.uncounted:
        return None
    return length + images.extra


def image_route_note(state: ServerState, model: ServedModel) -> str:
    """What the gateway does with a request with images for ``model``, whose own kind
    takes none (the render routes' note)."""
    if state.config.images == "refuse":
        return (
            f"this request carries images, which the engine's {model.kind.name} endpoint "
            "takes none of: the gateway answers it with a 400 (--images refuse)"
        )
    return (
        "this request carries images: the gateway sends it to the engine's "
        f"{model.kind.image_kind().name} endpoint, which renders it itself; the prompt shown "
        "is dsmlkit's rendering, not what the engine gets"
    )


async def prompt_length(
    state: ServerState, model: ServedModel, prompt: Prompt, key: str | None
) -> int | None:
    """The prompt's length in tokens: its ids, else the engine's ``/tokenize`` count of the
    text (when the engine has one), else unknown."""
    if prompt.token_ids is not None:
        return len(prompt.token_ids)
    facts = model.engine.facts
    root = model.config.upstream_root
    if facts is None or facts.token_ids is None or root is None:
        return None
    body = {
        "model": model.engine_model,
        "prompt": prompt.encoded.text,
        "add_special_tokens": False,
    }
    answer = await state.upstream().get_json(root + "/tokenize", model.kind.auth_headers(key), body)
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if isinstance(count, int) else None


class PlanStage:
    """Stage 5's inputs for the served model's upstream kind
    (:class:`~.upstream_kinds.PlanInputs`): ``req`` and its ``body`` (``size`` bytes), sent
    with ``key``. ``waited``: the seconds spent on the engine's ``/tokenize`` count."""

    def __init__(
        self,
        state: ServerState,
        model: ServedModel,
        req: ChatRequest,
        body: Any,
        key: str | None,
        size: int,
        *,
        put_back: bool = False,
        call_ids: Collection[str] = (),
    ) -> None:
        self._state, self._model, self._key, self._size = state, model, key, size
        self.req, self.body, self.put_back, self.call_ids = req, body, put_back, call_ids
        self.engine_model = model.engine_model
        self.waited: float | None = None

    async def prompt(self) -> Prompt:
        return await run_for_body(self._size, render_prompt, self._state, self._model, self.req)

    async def prompt_length(self, prompt: Prompt) -> int | None:
        asked = time.perf_counter()
        try:
            return await prompt_length(self._state, self._model, prompt, self._key)
        finally:
            self.waited = time.perf_counter() - asked

    async def plan(self) -> UpstreamPlan:
        """The served model's kind's plan; for a request with images, the plan of the kind
        that carries them (see the module docstring)."""
        kind = self._model.kind
        images = conversation_images(self.req.conversation)
        if not images:
            return await kind.plan(self)
        vision_of(self.req, images)
        carrier = kind.image_kind()
        if carrier is kind:
            return await kind.plan(self)
        if self._state.config.images == "refuse":
            raise InvalidRequest(
                f"this image cannot reach the model: the engine's {kind.name} endpoint "
                "takes no images and this server refuses to send requests with images "
                "elsewhere (--images refuse); start it with --images route to send them to "
                f"the engine's {carrier.name} endpoint, or leave the image out",
                images[0].param,
            )
        return await self._rerouted(carrier)

    async def _rerouted(self, carrier: UpstreamKind) -> UpstreamPlan:
        """``carrier``'s plan, its ``max_tokens`` fitted to the context as the model's own
        kind would (the prompt counted as dsmlkit renders it, images included)."""
        plan = await carrier.plan(self)
        length = await self.prompt_length(await self.prompt())
        tokens = with_images(length, image_count(self.req))
        fallback = plan.fallback_body
        return replace(
            plan,
            upstream_body=self._fitted(plan.upstream_body, tokens),
            fallback_body=None if fallback is None else self._fitted(fallback, tokens),
            prompt_tokens=tokens,
            rerouted=Reroute(carrier, IMAGE_REASON),
        )

    def _fitted(self, body: dict[str, Any], prompt_tokens: int | None) -> dict[str, Any]:
        """``body`` with the ``max_tokens`` the model's own kind would send for a prompt of
        ``prompt_tokens`` (unknown: the body as it is, the client's budget or the engine's
        default)."""
        if prompt_tokens is None:
            return body
        clamp = self._state.config.max_tokens_policy == "clamp"
        budget = self.req.resolved_max_tokens(prompt_tokens, self._model.max_model_len, clamp=clamp)
        fitted = {**body, "max_tokens": budget}
        fitted.pop("max_completion_tokens", None)
        return fitted
