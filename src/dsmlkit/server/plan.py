"""The plan stage: a typed request → what goes upstream and how its answer is read back.

The served model's upstream kind (:mod:`.upstream_kinds`) makes the plan; this stage gives
it what only the server has (:class:`PlanStage`): the prompt rendered with the server's
cache and policy (:func:`render_prompt`, shared with the render routes, so what
``/v1/chat/completions/render`` returns is exactly what the engine gets) and the engine's
count of a text prompt (:func:`prompt_length`).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from dsmlkit.api import ChatRequest
from dsmlkit.server.offload import run_for_body
from dsmlkit.server.state import ServedModel, ServerState
from dsmlkit.server.upstream_kinds import Prompt, UpstreamPlan


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
        """The served model's kind's plan."""
        return await self._model.kind.plan(self)
