"""Images through a real ``dsmlkit serve``, with the official SDKs: never dropped.

Behind ``--upstream-api completions`` (whose ``/v1/completions`` takes no images) a request
with an image goes to the engine's chat endpoint with the image intact, and the answer says
so (``x-dsmlkit-upstream: chat; reason=image``, and the log line); with ``--images refuse``
it is a 400 naming the image and the flag; a V3.2 model (no image token) answers 400 in
either upstream mode. ``/v1/messages/count_tokens`` counts each image's span by its size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.images import base64_png
from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine
from tests.server.loopback import serve_in_thread
from tests.server.process import ServerLog, serve_process

# Real dsmlkit serve processes.
pytestmark = pytest.mark.slow

MODEL = "deepseek-v4.1"
#: The engine's context: small, so that the images' tokens decide what max_tokens fits.
CONTEXT = 4000
HEADER = "x-dsmlkit-upstream"
ROUTED = "chat; reason=image"
#: The image the requests carry, and its base64 text (what the engine must receive).
IMAGE = base64_png(1024, 1024)
IMAGE_URL = f"data:image/png;base64,{IMAGE}"
#: V4.1's tokens for a 1024x1024 and a 16x16 image (tests/test_render_images.py's table).
TOKENS_1024, TOKENS_16 = 652, 184


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeEngine, str]]:
    """An engine of its own (its context is small), behind every gateway here."""
    engine = FakeEngine(max_model_len=CONTEXT)
    with serve_in_thread(engine.app) as url:
        yield engine, url


@pytest.fixture
def engine(fake: tuple[FakeEngine, str]) -> FakeEngine:
    fake[0].requests.clear()
    fake[0].script.clear()
    return fake[0]


def _gateway(url: str, tokenizer: str, *flags: str, env: dict[str, str] | None = None) -> Any:
    return serve_process(
        "--upstream", url, "--tokenizer", tokenizer, "--log-format", "json", *flags, env=env
    )


@pytest.fixture(scope="module")
def routed(fake: tuple[FakeEngine, str], v41_tokenizer: str) -> Iterator[tuple[str, ServerLog]]:
    """A completions-mode gateway (the default), images routed (the default)."""
    with _gateway(fake[1], v41_tokenizer) as (process, url):
        yield url, ServerLog(process)


@pytest.fixture(scope="module")
def refusing(fake: tuple[FakeEngine, str], v41_tokenizer: str) -> Iterator[str]:
    """A completions-mode gateway told to refuse images, through the environment."""
    with _gateway(fake[1], v41_tokenizer, env={"DSMLKIT_IMAGES": "refuse"}) as (_, url):
        yield url


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT)


# --- one request with an image per API, and the path of its image -----------------------

CHAT_MESSAGES: list[Any] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        ],
    }
]
CHAT_IMAGE = "messages[0].content[1]"

#: A screenshot inside a tool result.
MESSAGES_MESSAGES: list[Any] = [
    {"role": "user", "content": "Take a screenshot."},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "text", "text": "the screen:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": IMAGE},
                    },
                ],
            }
        ],
    },
]
MESSAGES_TOOLS: list[Any] = [{"name": "shot", "input_schema": {"type": "object"}}]
MESSAGES_IMAGE = "messages[2].content[0].content[1]"

#: A screenshot inside a function call's output.
RESPONSES_INPUT: list[Any] = [
    {"role": "user", "content": "Take a screenshot."},
    {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [{"type": "input_image", "image_url": IMAGE_URL}],
    },
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "shot", "parameters": {"type": "object"}, "strict": False}
]
RESPONSES_IMAGE = "input[2].output[0]"
#: Without reasoning: the fake engine's chat endpoint, like DeepSeek's hosted one, wants
#: the reasoning of an earlier call back in thinking mode.
CHAT_MODE: dict[str, Any] = {"reasoning": {"effort": "none"}}


def ask(api: str, url: str, stream: bool) -> tuple[str, dict[str, str]]:
    """The answer's text and response headers, for the request with an image in ``api``."""
    if api == "chat":
        client = _openai(url)
        if stream:
            chunks = client.chat.completions.create(
                model=MODEL, messages=CHAT_MESSAGES, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return text, dict(chunks.response.headers)
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=CHAT_MESSAGES)
        return raw.parse().choices[0].message.content or "", dict(raw.headers)
    if api == "messages":
        claude = _anthropic(url)
        fields: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 100,
            "messages": MESSAGES_MESSAGES,
            "tools": MESSAGES_TOOLS,
        }
        if stream:
            with claude.messages.stream(**fields) as events:
                message = events.get_final_message()
                headers = dict(events.response.headers)
        else:
            raw_message = claude.messages.with_raw_response.create(**fields)
            message, headers = raw_message.parse(), dict(raw_message.headers)
        text = "".join(block.text for block in message.content if block.type == "text")
        return text, headers
    client = _openai(url)
    if stream:
        events = client.responses.create(
            model=MODEL, input=RESPONSES_INPUT, tools=RESPONSES_TOOLS, stream=True, **CHAT_MODE
        )
        done = [e.response for e in events if e.type == "response.completed"]
        return done[0].output_text, dict(events.response.headers)
    raw_response = client.responses.with_raw_response.create(
        model=MODEL, input=RESPONSES_INPUT, tools=RESPONSES_TOOLS, **CHAT_MODE
    )
    return raw_response.parse().output_text, dict(raw_response.headers)


APIS = [(api, stream) for api in ("chat", "messages", "responses") for stream in (False, True)]
IDS = [f"{api}-{'stream' if stream else 'whole'}" for api, stream in APIS]


@pytest.mark.parametrize(("api", "stream"), APIS, ids=IDS)
def test_an_image_reaches_the_engines_chat_endpoint_intact(
    routed: tuple[str, ServerLog], engine: FakeEngine, api: str, stream: bool
) -> None:
    url, log = routed
    since = len(log.lines)
    text, headers = ask(api, url, stream)
    assert text == "Hello."  # the fake engine's chat answer
    assert headers[HEADER] == ROUTED
    (sent,) = engine.requests
    assert "prompt" not in sent  # not /v1/completions: the chat endpoint, messages and all
    assert IMAGE in json.dumps(sent["messages"])  # the pixels, not a placeholder
    assert sent["model"] == MODEL
    route = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}.get(api, "/v1/responses")
    log.wait_for("request", since, route=route)
    (line,) = [r for r in log.records(since) if r.get("route") == route]
    assert line["upstream_route"] == ROUTED


def test_a_routed_requests_max_tokens_is_fitted_to_what_its_image_leaves(
    routed: tuple[str, ServerLog], engine: FakeEngine
) -> None:
    url = routed[0]
    counted = _anthropic(url).messages.count_tokens(
        model=MODEL, messages=MESSAGES_MESSAGES, tools=MESSAGES_TOOLS
    )
    raw = _anthropic(url).messages.with_raw_response.create(
        model=MODEL, max_tokens=CONTEXT, messages=MESSAGES_MESSAGES, tools=MESSAGES_TOOLS
    )
    left = CONTEXT - counted.input_tokens
    assert raw.headers["x-dsmlkit-max-tokens-clamped"] == str(left)
    assert engine.requests[-1]["max_tokens"] == left
    assert counted.input_tokens > TOKENS_1024  # the image's span is in the count


def test_a_request_without_images_still_goes_to_completions(
    routed: tuple[str, ServerLog], engine: FakeEngine
) -> None:
    raw = _openai(routed[0]).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}]
    )
    assert HEADER not in raw.headers
    assert "prompt" in engine.requests[-1]


def _count(url: str, image: dict[str, Any]) -> tuple[int, dict[str, str]]:
    content = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image", "source": image},
    ]
    messages: list[Any] = [{"role": "user", "content": content}]
    raw = _anthropic(url).messages.with_raw_response.count_tokens(model=MODEL, messages=messages)
    return raw.parse().input_tokens, dict(raw.headers)


def _base64(width: int, height: int) -> dict[str, Any]:
    return {"type": "base64", "media_type": "image/png", "data": base64_png(width, height)}


def test_count_tokens_counts_each_image_by_its_size(routed: tuple[str, ServerLog]) -> None:
    url = routed[0]
    large, large_headers = _count(url, _base64(1024, 1024))
    small, _ = _count(url, _base64(16, 16))
    # an image given by URL: its size is not known here, only its placeholder is counted
    text, headers = _count(url, {"type": "url", "url": "https://example.com/cat.png"})
    assert headers["x-dsmlkit-uncounted-images"] == "1"
    assert "x-dsmlkit-uncounted-images" not in large_headers
    assert large == text - 1 + TOKENS_1024
    assert small == text - 1 + TOKENS_16


def test_an_unreadable_image_is_a_400_naming_it(routed: tuple[str, ServerLog]) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        _count(routed[0], {"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"})
    message = caught.value.message
    assert "messages[0].content[1]" in message
    assert "PNG, JPEG, WebP or GIF" in message


@pytest.mark.parametrize(("api", "stream"), APIS, ids=IDS)
def test_refused_images_are_a_400_naming_the_image_and_the_flag(
    refusing: str, engine: FakeEngine, api: str, stream: bool
) -> None:
    path = {"chat": CHAT_IMAGE, "messages": MESSAGES_IMAGE, "responses": RESPONSES_IMAGE}[api]
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
        ask(api, refusing, stream)
    message = str(caught.value)
    assert path in message
    assert "--images route" in message
    assert engine.requests == []


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_v32_has_no_image_token_so_an_image_is_a_400(
    fake: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str, mode: str
) -> None:
    flags = ("--dialect", "v3.2", "--upstream-api", mode)
    with _gateway(fake[1], v41_tokenizer, *flags) as (_, url):
        for api in ("chat", "messages"):
            with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
                ask(api, url, stream=api == "messages")
            message = str(caught.value)
            assert (CHAT_IMAGE if api == "chat" else MESSAGES_IMAGE) in message
            assert "v3.2 has no image token" in message
    assert engine.requests == []


def test_in_chat_mode_images_pass_as_they_came(
    fake: tuple[FakeEngine, str], engine: FakeEngine, v41_tokenizer: str
) -> None:
    with _gateway(fake[1], v41_tokenizer, "--upstream-api", "chat") as (_, url):
        text, headers = ask("messages", url, stream=True)
    assert text == "Hello."
    assert HEADER not in headers  # its own route
    assert IMAGE in json.dumps(engine.requests[-1]["messages"])


def test_the_render_route_counts_the_image_and_says_where_it_goes(
    routed: tuple[str, ServerLog],
) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": MESSAGES_MESSAGES}
    rendered = httpx.post(routed[0] + "/v1/messages/render", json=body).json()
    assert rendered["images"] == {"count": 1, "tokens": TOKENS_1024, "uncounted": []}
    assert rendered["prompt_tokens"] == len(rendered["token_ids"]) - 1 + TOKENS_1024
    assert any("the engine's chat endpoint" in note for note in rendered["notes"])
