"""Upstream kinds: what the gateway sends for ``--upstream-api`` and how it reads the answer.

One class per kind owns its route, its first upstream body and the reader of its output
(:mod:`.readers`); :data:`UPSTREAM_KINDS` maps the setting's names to them, the only
place that does.

* :class:`Completions` (``completions``): the request is rendered by the gateway (so what
  ``/v1/chat/completions/render`` returns is exactly what the engine gets) and the prompt
  (token ids when a tokenizer is loaded) goes to the engine's ``/v1/completions``; the raw
  text that streams back is fed into one parser per request.
* :class:`Chat` (``chat``): the request goes to a hosted ``/v1/chat/completions`` as chat,
  its ``tool_calls`` pass through and DSML leaked into ``content`` / ``reasoning_content``
  is repaired into calls (:mod:`dsmlkit.parse.chat_repair`).
* :class:`Messages` (``messages``): the request goes to a hosted Anthropic
  ``/v1/messages`` (:mod:`dsmlkit.api.anthropic_upstream`), its ``tool_use`` blocks pass
  through and DSML leaked into its text and thinking blocks is repaired the same way.

What a kind needs of the server to plan (the rendered prompt, its length) it asks of
:class:`PlanInputs`, which the plan stage (:mod:`.plan`) provides. A kind whose route takes
no images (``carries_images`` false) names the kind a request with images goes to instead
(:meth:`UpstreamKind.image_kind`); the plan stage decides per request.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Protocol

from dsmlkit.api import CHAT, MESSAGES, ChatRequest, ClientApi, to_openai_chat_body
from dsmlkit.api.anthropic_upstream import to_anthropic_body
from dsmlkit.parse.chat_repair import ChatRepair
from dsmlkit.render import RenderResult
from dsmlkit.render.tokens import PromptTokenizer
from dsmlkit.server.call_ids import AnswerIds
from dsmlkit.server.forced import call_opener, fallback_body
from dsmlkit.server.readers import (
    ChatReader,
    CompletionsReader,
    MessagesReader,
    UpstreamPrompt,
    UpstreamReader,
)

#: Keeps DSML intact in vLLM-style engines: the ｜DSML｜ marker and <think> tokens are special
#: tokens, which these engines otherwise drop or space out when detokenizing.
KEEP_SPECIAL_TOKENS = {"skip_special_tokens": False, "spaces_between_special_tokens": False}

#: Tokens an engine's tokenizer may write for a text beyond one per UTF-8 byte (a prefix
#: space some tokenizers add); DeepSeek's byte-level BPE writes none.
_BOUND_SLACK = 16


@dataclass(frozen=True)
class Encoded:
    """A prompt as it goes upstream: ids (or None: text) and the text, with notes."""

    token_ids: list[int] | None
    text: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Prompt:
    """A request's rendered prompt and what goes upstream (ids or text), for an engine
    that serves ``engine_model`` with a context of ``max_model_len`` tokens; ``clamp``: a
    ``max_tokens`` past what the context leaves is lowered, not refused
    (``--max-tokens-policy``)."""

    req: ChatRequest
    result: RenderResult
    encoded: Encoded
    engine_model: str | None
    max_model_len: int | None
    tokenizer: PromptTokenizer | None
    clamp: bool = False

    @property
    def token_ids(self) -> list[int] | None:
        return self.encoded.token_ids

    @property
    def upstream_prompt(self) -> UpstreamPrompt:
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
        max_model_len = self.max_model_len if prompt_tokens is not None else None
        return {
            "max_tokens": self.req.resolved_max_tokens(
                prompt_tokens, max_model_len, clamp=self.clamp if clamp is None else clamp
            ),
            **self.req.sampling,
            "stop": stop,
            **KEEP_SPECIAL_TOKENS,
        }

    def uncounted_bound(self) -> int | None:
        """An upper bound on the text prompt's length in tokens (every token covers a
        byte), when it and the request's ``max_tokens`` together fit the model's context
        (then no count can change what is sent), else None."""
        bound = len(self.encoded.text.encode()) + _BOUND_SLACK
        limit = self.max_model_len
        fits = limit is None or bound + self.req.resolved_max_tokens() <= limit
        return bound if fits else None


@dataclass(frozen=True)
class Reroute:
    """A request planned by another ``kind`` than its model's own, and why (``reason``:
    ``image``); :attr:`header` says so to the client."""

    kind: UpstreamKind
    reason: str

    @property
    def header(self) -> str:
        """The value of :data:`UPSTREAM_HEADER`: ``chat; reason=image``."""
        return f"{self.kind.name}; reason={self.reason}"


#: The response header of a request sent to another upstream route than its model's own.
UPSTREAM_HEADER = "x-dsmlkit-upstream"


@dataclass(frozen=True)
class UpstreamPlan:
    """One gateway request, ready to send: the first upstream body, the reader of the
    upstream's output, and the usage known before sending. ``fallback_body`` is retried
    once when the upstream answers 400 (:func:`.forced.fallback_body`). What reaches
    the client passes a :class:`~.fold.CallGate` in every mode."""

    req: ChatRequest
    upstream_body: dict[str, Any]
    reader: UpstreamReader
    prompt_tokens: int | None
    fallback_body: dict[str, Any] | None = None
    #: The seconds spent on the engine's count of the prompt (None: not asked).
    tokenize_seconds: float | None = None
    #: Set when another kind than the model's own planned it (a request with images).
    rerouted: Reroute | None = None


class PlanInputs(Protocol):
    """What a kind plans from: the typed request and its body as the client sent it
    (``put_back``: state was restored into the typed conversation; ``call_ids``: the
    conversation's call ids as sent), the engine's model name, and the server's help."""

    @property
    def req(self) -> ChatRequest: ...

    @property
    def body(self) -> Any: ...

    @property
    def put_back(self) -> bool: ...

    @property
    def call_ids(self) -> Collection[str]: ...

    @property
    def engine_model(self) -> str | None: ...

    async def prompt(self) -> Prompt:
        """The request rendered and encoded."""

    async def prompt_length(self, prompt: Prompt) -> int | None:
        """``prompt``'s length in tokens as the engine counts it (None: unknown)."""


class UpstreamKind(ABC):
    """One ``--upstream-api``: its ``name``, the ``route`` its requests go to, and how a
    typed request becomes an :class:`UpstreamPlan`. ``reads_token_ids``: the engine's
    ``/tokenize`` is read at startup (prompts may go as ids). ``carries_images``: a
    request's images reach the engine through ``route``."""

    name: ClassVar[str]
    route: ClassVar[str]
    reads_token_ids: ClassVar[bool]
    carries_images: ClassVar[bool] = True

    def image_kind(self) -> UpstreamKind:
        """The kind that plans a request with images: this one when it carries them."""
        return self

    @abstractmethod
    def engine_model(self, served: Sequence[str], fallback: str) -> str | None:
        """The name sent upstream as ``model`` when none is configured, given what the
        engine serves (None: the client's own is forwarded)."""

    @abstractmethod
    async def plan(self, inputs: PlanInputs) -> UpstreamPlan:
        """The plan for one typed request."""

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """The headers of an upstream request sent with ``key`` (None: no key): a bearer
        token."""
        return {"authorization": f"Bearer {key}"} if key else {}


class Completions(UpstreamKind):
    """An engine's ``/v1/completions``, sent the prompt the gateway renders. A prompt sent
    as text is counted by the engine when a streamed answer shows its length first
    (Messages) or when the count could change ``max_tokens``; else its byte length bounds
    it and the engine's usage at the end gives the count."""

    name = "completions"
    route = "/completions"
    reads_token_ids = True
    carries_images = False

    def image_kind(self) -> UpstreamKind:
        """The engine's chat endpoint: ``/v1/completions`` takes no images."""
        return CHAT_KIND

    def engine_model(self, served: Sequence[str], fallback: str) -> str | None:
        return served[0] if served else fallback

    async def plan(self, inputs: PlanInputs) -> UpstreamPlan:
        req = inputs.req
        prompt = await inputs.prompt()
        shown_first = req.stream and req.api.usage_at_start
        bound = None if prompt.token_ids is not None or shown_first else prompt.uncounted_bound()
        prompt_tokens = None if bound is not None else await inputs.prompt_length(prompt)
        tokenizer = prompt.tokenizer if prompt.token_ids is not None else None
        dialect = req.render.dialect
        reader = CompletionsReader(
            req.output_parser(prompt.result),
            dialect,
            prompt.upstream_prompt,
            prompt.result.output_starts_in,
            tokenizer,
            CompletionsBodies(prompt, prompt_tokens if bound is None else bound),
            opener=call_opener(dialect, req.conversation.tool_choice.name)
            if req.requires_call
            else (),
            one_call=req.one_call_only,
            stop_sequences=req.stop_sequences,
        )
        return UpstreamPlan(req, reader.body, reader, prompt_tokens)


class CompletionsBodies:
    """The ``/v1/completions`` bodies of one answer: the first for ``prompt``, whose length
    in tokens is ``first_tokens`` (or at most that, when it was not counted), and later
    ones that extend it (a forced call's second request), fitted to the context."""

    def __init__(self, prompt: Prompt, first_tokens: int | None) -> None:
        self._prompt = prompt
        self._first = prompt.upstream_prompt
        self._first_tokens = first_tokens

    def __call__(self, prompt: UpstreamPrompt, extra_stop: Sequence[str]) -> dict[str, Any]:
        # a later request of the answer extends the prompt the client's max_tokens was
        # checked against: it is fitted to the context, not refused
        later = True if prompt is not self._first else None
        length = self._length_of(prompt)
        body: dict[str, Any] = {
            "model": self._prompt.engine_model,
            "prompt": prompt,
            **self._prompt.sampling_params(length, clamp=later),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        body["stop"] = [*body["stop"], *extra_stop]
        if isinstance(prompt, str):
            body["add_special_tokens"] = False  # the prompt already starts with BOS
        return body

    def _length_of(self, prompt: UpstreamPrompt) -> int | None:
        """The length in tokens of an upstream prompt that extends the first one: exact
        for ids; for text at most the first prompt's tokens plus one per byte added."""
        if isinstance(prompt, list):
            return len(prompt)
        if self._first_tokens is None or not isinstance(self._first, str):
            return None
        return self._first_tokens + len(prompt[len(self._first) :].encode())


class HostedKind(UpstreamKind):
    """A hosted endpoint that speaks one client API (``client_api``, called ``speaks`` in
    messages): a request in that API goes up as it came, and only its answers can hold
    what the endpoint returns beside the conversation (the blocks of its server tools,
    :mod:`dsmlkit.conversation.server_tools`): a request in another API that carries a
    server tool is refused, naming the tool and the route that takes it. The client's own
    model name is forwarded."""

    reads_token_ids = False
    client_api: ClassVar[ClientApi[Any]]
    speaks: ClassVar[str]

    def engine_model(self, served: Sequence[str], fallback: str) -> str | None:
        return None

    def passes_through(self, req: ChatRequest) -> bool:
        """Whether ``req`` came in the API this endpoint speaks (its body goes up as it
        came, and its answer can hold what the endpoint returns beside the conversation)."""
        return req.api is self.client_api

    def refuse_server_tools(self, req: ChatRequest) -> None:
        """The 400 for a request in another API than ``client_api`` with a server tool."""
        if req.server_tools and not self.passes_through(req):
            tool = req.server_tools[0]
            raise tool.not_representable(req.api.name, self.speaks, self.client_api.path)


class Chat(HostedKind):
    """A hosted ``/v1/chat/completions``: a Chat Completions body as it came (its messages
    those of the typed conversation when state was put back into it), any other converted.
    The answer's calls get ids unique in the conversation (:class:`.call_ids.AnswerIds`).

    A hosted endpoint's server tools (:mod:`dsmlkit.conversation.server_tools`) go on in the
    body as sent, and the message fields it returns for them reach a Chat Completions
    client as they came (:class:`~dsmlkit.parse.UpstreamFields`)."""

    name = "chat"
    route = "/chat/completions"
    client_api = CHAT
    speaks = "Chat Completions"

    async def plan(self, inputs: PlanInputs) -> UpstreamPlan:
        req = inputs.req
        self.refuse_server_tools(req)
        passed = self.passes_through(req)
        if passed:
            upstream_body = dict(inputs.body)
            if inputs.put_back:
                upstream_body["messages"] = req.conversation.chat_messages()
        else:
            upstream_body = to_openai_chat_body(req)
        upstream_body.update(stream=True, stream_options={"include_usage": True})
        if inputs.engine_model is not None:
            upstream_body["model"] = inputs.engine_model
        ids = AnswerIds(req.api.call_ids(), inputs.call_ids)
        repair = ChatRepair(partial(req.new_parser, "content"), ids.client_id, pass_fields=passed)
        reader = ChatReader(repair, ids)
        names = [_tool_name(tool.get("function")) for tool in upstream_body.get("tools") or ()]
        fallback = fallback_body(req, upstream_body, "auto", names)
        return UpstreamPlan(req, upstream_body, reader, None, fallback)


class Messages(HostedKind):
    """A hosted Anthropic ``/v1/messages`` (DeepSeek's ``…/anthropic``): a Messages body as
    it came with its ``system`` and ``messages`` written from the typed conversation (the
    thinking blocks a client holds carry the gateway's signatures; the upstream gets its
    own back, :mod:`.restore`), any other request converted
    (:func:`~dsmlkit.api.anthropic_upstream.to_anthropic_body`). The key goes as
    ``x-api-key``, with ``anthropic-version``. Calls get ids as in chat mode.

    Server tools go on in the body as sent; the blocks the endpoint returns for them (any
    block the reader does not read) reach a Messages client whole in their places
    (:class:`~dsmlkit.parse.UpstreamBlock`), and the ones it sends back go up as they came
    (:class:`~dsmlkit.conversation.model.RawBlockPart`)."""

    name = "messages"
    route = "/messages"
    client_api = MESSAGES
    speaks = "Anthropic Messages"
    #: The ``anthropic-version`` header sent.
    version = "2023-06-01"

    def auth_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        if key:
            headers["x-api-key"] = key
        return headers

    async def plan(self, inputs: PlanInputs) -> UpstreamPlan:
        req = inputs.req
        self.refuse_server_tools(req)
        converted = to_anthropic_body(req)
        passed = self.passes_through(req)
        if passed:
            upstream_body = {**inputs.body, "messages": converted["messages"]}
            upstream_body.pop("system", None)
            if "system" in converted:
                upstream_body["system"] = converted["system"]
        else:
            upstream_body = converted
        upstream_body["stream"] = True
        if inputs.engine_model is not None:
            upstream_body["model"] = inputs.engine_model
        ids = AnswerIds(req.api.call_ids(), inputs.call_ids)
        repair = ChatRepair(partial(req.new_parser, "content"), ids.client_id)
        reader = MessagesReader(repair, ids, pass_blocks=passed)
        names = [tool.get("name") for tool in upstream_body.get("tools") or ()]
        fallback = fallback_body(req, upstream_body, {"type": "auto"}, names)
        return UpstreamPlan(req, upstream_body, reader, None, fallback)


def _tool_name(function: Any) -> str | None:
    """The name of a chat tool's ``function`` (None: it has none)."""
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


#: The kind that carries the images of a completions model's requests.
CHAT_KIND = Chat()
#: The ``--upstream-api`` names and their kinds; the first is the default.
UPSTREAM_KINDS: Mapping[str, UpstreamKind] = {
    kind.name: kind for kind in (Completions(), CHAT_KIND, Messages())
}
DEFAULT_UPSTREAM_KIND = Completions.name
