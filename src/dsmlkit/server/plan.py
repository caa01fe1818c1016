"""The plan stage: a typed request → what goes upstream and how its answer is read back.

``--upstream-api completions``: the request is rendered here (:func:`render_prompt`, shared
with the render routes, so what ``/v1/chat/completions/render`` returns is exactly what the
engine gets) and the prompt (token ids when a tokenizer is loaded) goes to the engine's
``/v1/completions``; the raw text that streams back is fed into one parser per request.
``--upstream-api chat``: the request goes to a hosted ``/v1/chat/completions`` as chat, its
``tool_calls`` pass through and DSML leaked into ``content`` / ``reasoning_content`` is
repaired into calls (:mod:`dsmlkit.parse.chat_repair`). Either way the plan says how each
upstream choice becomes parser events (:attr:`UpstreamPlan.feed`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsmlkit.api import ChatRequest, to_openai_chat_body
from dsmlkit.parse import Event
from dsmlkit.parse.chat_repair import ChatRepair
from dsmlkit.render import RenderResult, render_conversation
from dsmlkit.server.call_ids import AnswerIds
from dsmlkit.server.engine import Encoded
from dsmlkit.server.forced import CompletionsAnswer, Resume, chat_fallback_body
from dsmlkit.server.state import ServedModel, ServerState

#: Keeps DSML intact in vLLM-style engines: the ｜DSML｜ marker and <think> tokens are special
#: tokens, which these engines otherwise drop or space out when detokenizing.
KEEP_SPECIAL_TOKENS = {"skip_special_tokens": False, "spaces_between_special_tokens": False}


@dataclass(frozen=True)
class Prompt:
    """A request's rendered prompt and what goes upstream (ids or text); ``clamp``: a
    ``max_tokens`` past what the context leaves is lowered, not refused
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
    def upstream_prompt(self) -> list[int] | str:
        """What the engine is sent: the ids when known, else the text."""
        return self.token_ids if self.token_ids is not None else self.encoded.text

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


def render_prompt(state: ServerState, model: ServedModel, req: ChatRequest) -> Prompt:
    """Render and encode one typed request (CPU-bound: large ones run off the event loop)."""
    result = render_conversation(req.conversation, req.render, state.render_cache)
    clamp = state.config.max_tokens_policy == "clamp"
    return Prompt(model, req, result, model.plan.encode(result), clamp)


#: Tokens an engine's tokenizer may write for a text beyond one per UTF-8 byte (a prefix
#: space some tokenizers add); DeepSeek's byte-level BPE writes none.
_BOUND_SLACK = 16


def uncounted_bound(prompt: Prompt) -> int | None:
    """An upper bound on the text prompt's length in tokens (every token covers a byte),
    when it and the request's ``max_tokens`` together fit the model's context (then no
    count can change what is sent), else None."""
    bound = len(prompt.encoded.text.encode()) + _BOUND_SLACK
    limit = prompt.model.max_model_len
    fits = limit is None or bound + prompt.req.resolved_max_tokens() <= limit
    return bound if fits else None


async def prompt_length(state: ServerState, prompt: Prompt, key: str | None) -> int | None:
    """The prompt's length in tokens: its ids, else the engine's ``/tokenize`` count of the
    text (when the engine has one), else unknown."""
    if prompt.token_ids is not None:
        return len(prompt.token_ids)
    model = prompt.model
    facts = model.engine.facts
    root = model.config.upstream_root
    if facts is None or facts.token_ids is None or root is None:
        return None
    body = {
        "model": model.engine_model,
        "prompt": prompt.encoded.text,
        "add_special_tokens": False,
    }
    answer = await state.upstream().get_json(root + "/tokenize", key, body)
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if isinstance(count, int) else None


@dataclass(frozen=True)
class UpstreamPlan:
    """One gateway request, ready to send: the upstream body, how to fold the upstream's
    choices into events, and the usage known before sending.

    Forced calls (:mod:`.forced`): ``opening`` are events of text the gateway wrote into the
    answer itself; ``resume`` says after each upstream stream what follows (events, and
    the next upstream body or None); ``fallback_body`` is retried once when the upstream
    answers 400. What reaches the client passes a :class:`~.fold.CallGate` in every mode.
    ``upstream_ids``: the upstream's own id of each call the client got another id for
    (filled as the answer streams; :mod:`.call_ids`).
    """

    req: ChatRequest
    upstream_body: dict[str, Any]
    feed: Callable[[Mapping[str, Any]], list[Event]]
    close: Callable[[str], list[Event]]
    prompt_tokens: int | None
    opening: list[Event] = field(default_factory=list)
    resume: Resume | None = None
    fallback_body: dict[str, Any] | None = None
    upstream_ids: Mapping[str, str] = field(default_factory=dict)


def completions_plan(
    prompt: Prompt, prompt_tokens: int | None, bound: int | None = None
) -> UpstreamPlan:
    """The plan for an engine's ``/v1/completions``: ``prompt``, ``prompt_tokens`` long
    (``bound``: at most that long, when it was not counted; a later request of the answer
    is fitted to the context with it)."""
    req, model = prompt.req, prompt.model
    first_prompt = prompt.upstream_prompt
    first_tokens = prompt_tokens if prompt_tokens is not None else bound

    def make_body(sent: list[int] | str, extra_stop: Sequence[str]) -> dict[str, Any]:
        # a later request of the answer (a forced call's second) extends the prompt the
        # client's max_tokens was checked against: it is fitted to the context, not refused
        later = True if sent is not first_prompt else None
        upstream_body: dict[str, Any] = {
            "model": model.engine_model,
            "prompt": sent,
            **prompt.sampling_params(_length_of(sent, first_prompt, first_tokens), clamp=later),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        upstream_body["stop"] = [*upstream_body["stop"], *extra_stop]
        if isinstance(sent, str):
            upstream_body["add_special_tokens"] = False  # the prompt already starts with BOS
        return upstream_body

    tokenizer = model.tokenizer if prompt.token_ids is not None else None
    answer = CompletionsAnswer(req, first_prompt, prompt.result, tokenizer, make_body)

    def feed(choice: Mapping[str, Any]) -> list[Event]:
        text = choice.get("text")
        return answer.feed(text) if isinstance(text, str) and text else []

    return UpstreamPlan(
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


def chat_plan(
    model: ServedModel, req: ChatRequest, body: Any, restored: bool, taken: Collection[str] = ()
) -> UpstreamPlan:
    """The plan for a hosted ``/v1/chat/completions``: a Chat Completions body as it came
    (its messages those of the typed conversation when state was ``restored`` into it), any
    other converted. The answer's calls get ids unique in the conversation, whose call ids
    as sent are ``taken`` (:class:`.call_ids.AnswerIds`)."""
    if req.adapter.chat_form:
        upstream_body = dict(body)
        if restored:
            upstream_body["messages"] = req.conversation.chat_messages()
    else:
        upstream_body = to_openai_chat_body(req)
    upstream_body.update(stream=True, stream_options={"include_usage": True})
    if model.engine_model is not None:
        upstream_body["model"] = model.engine_model
    ids = AnswerIds(req.adapter.call_ids(), taken)
    repair = ChatRepair(lambda: req.new_parser("content"), ids.client_id)

    def feed(choice: Mapping[str, Any]) -> list[Event]:
        delta = choice.get("delta")
        return repair.feed(delta) if isinstance(delta, Mapping) else []

    return UpstreamPlan(
        req,
        upstream_body,
        feed,
        repair.close,
        None,
        fallback_body=chat_fallback_body(req, upstream_body),
        upstream_ids=ids.upstream,
    )
