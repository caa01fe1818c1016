"""A request body → the exact prompt, its token ids and what an engine must be sent.

Shared by the render routes (which show it) and the completions gateway (which sends it),
so what ``/v1/chat/completions/render`` returns is exactly what the engine gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsmlkit.api import ChatRequest, parse_request
from dsmlkit.api.common import Api
from dsmlkit.render import RenderResult, render_conversation
from dsmlkit.server.engine import Encoded
from dsmlkit.server.reasoning_store import Restored
from dsmlkit.server.response_store import with_history
from dsmlkit.server.state import ServedModel, ServerState

#: Keeps DSML intact in vLLM-style engines: the ｜DSML｜ marker and <think> tokens are special
#: tokens, which these engines otherwise drop or space out when detokenizing.
KEEP_SPECIAL_TOKENS = {"skip_special_tokens": False, "spaces_between_special_tokens": False}


@dataclass(frozen=True)
class Prepared:
    """A validated request, its rendered prompt and what goes upstream (ids or text);
    ``clamp``: a ``max_tokens`` past what the context leaves is lowered, not refused
    (``--max-tokens-policy``)."""

    model: ServedModel
    req: ChatRequest
    result: RenderResult
    encoded: Encoded
    clamp: bool = False

    @property
    def token_ids(self) -> list[int] | None:
        return self.encoded.token_ids

    @property
    def notes(self) -> list[str]:
        return [*self.result.notes, *self.encoded.notes]

    def sampling_params(
        self, prompt_tokens: int | None = None, *, clamp: bool | None = None
    ) -> dict[str, Any]:
        """Sampling parameters for an OpenAI ``/v1/completions`` engine.

        The resolved ``max_tokens`` (always: an engine's own default may be as low as 16;
        capped by what the engine's context leaves after the prompt, ``prompt_tokens`` long,
        when both are known; a client's value past that is lowered only with ``clamp``,
        which defaults to the server's policy), the client's own parameters, its stop
        strings followed by the template's (EOS), and the flags that keep special tokens in
        the output text.
        """
        stop = list(self.req.stop_sequences)
        stop += [text for text in self.result.stop if text not in stop]
        if prompt_tokens is None and self.token_ids is not None:
            prompt_tokens = len(self.token_ids)
        max_model_len = self.model.max_model_len if prompt_tokens is not None else None
        return {
            "max_tokens": self.req.resolved_max_tokens(
                prompt_tokens, max_model_len, clamp=self.clamp if clamp is None else clamp
            ),
            **self.req.sampling,
            "stop": stop,
            **KEEP_SPECIAL_TOKENS,
        }


async def restore_history(state: ServerState, api: Api, body: Any) -> Restored:
    """``body`` with its history, dropped reasoning and the model's own words put back
    (before it is read), the same for the gateway and the render routes."""
    if api == "responses":
        return await with_history(state.reasoning, state.keys, body)
    return await state.reasoning.restore(api, body)


def model_of(state: ServerState, body: Any) -> ServedModel:
    """The served model a request body names (see :meth:`ServerState.model_for`)."""
    return state.model_for(body.get("model") if isinstance(body, dict) else None)


def prepare(state: ServerState, api: Api, body: Any) -> Prepared:
    """Read, render and encode one request body; caller mistakes raise at once.

    CPU-bound: routes run it through :func:`~dsmlkit.server.offload.run_for_body`.
    """
    model = model_of(state, body)
    cache = state.render_cache
    req = parse_request(api, body, dialect=model.dialect, sealer=state.keys, cache=cache)
    result = render_conversation(req.conversation, req.render, cache)
    clamp = state.config.max_tokens_policy == "clamp"
    return Prepared(model, req, result, model.plan.encode(result), clamp)


async def prompt_length(state: ServerState, prepared: Prepared, key: str | None) -> int | None:
    """The prompt's length in tokens: its ids, else the engine's ``/tokenize`` count of the
    text (when the engine has one), else unknown."""
    if prepared.token_ids is not None:
        return len(prepared.token_ids)
    model = prepared.model
    facts = model.engine.facts
    root = model.config.upstream_root
    if facts is None or facts.token_ids is None or root is None:
        return None
    body = {
        "model": model.engine_model,
        "prompt": prepared.encoded.text,
        "add_special_tokens": False,
    }
    answer = await state.upstream().get_json(root + "/tokenize", key, body)
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if isinstance(count, int) else None
