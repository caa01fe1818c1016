"""Fixtures: a fake engine on a loopback port and gateways in front of it.

The engine and the two standard gateways (completions and chat mode) live for the whole
session; each test starts with an empty script and request log.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from dsmlkit.server import ServerConfig, create_app
from tests.server.fake_engine import FakeEngine
from tests.server.loopback import serve_in_thread
from tests.server.process import serve_process

#: Upstream read timeout of the test gateways: long enough for any replay, short enough
#: that a hanging engine fails a test quickly.
TEST_UPSTREAM_TIMEOUT = 1.5
#: What the fake engine serves (as vLLM's --served-model-name would list them).
ENGINE_MODELS = ("deepseek-v4.1",)
ENGINE_MAX_MODEL_LEN = 163840
#: What the fake hosted chat endpoint serves (the chat tests' clients name these).
HOSTED_MODELS = ("deepseek-v4.1", "m", "deepseek-chat", "claude-via-gateway", "hosted-model")
#: Client-side timeout: a gateway that hangs fails the test instead of blocking it.
CLIENT_TIMEOUT = 5.0


@dataclass
class Gateway:
    """A running gateway and clients pointed at it."""

    url: str
    engine: FakeEngine

    def openai(self) -> openai.OpenAI:
        return openai_client(self.url)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic_client(self.url)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=CLIENT_TIMEOUT)


@functools.cache
def openai_client(url: str) -> openai.OpenAI:
    """One client per gateway (building an SDK client costs tens of milliseconds)."""
    return openai.OpenAI(
        base_url=url + "/v1", api_key="test", max_retries=0, timeout=CLIENT_TIMEOUT
    )


@functools.cache
def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, timeout=CLIENT_TIMEOUT)


#: Fixtures that serve HTTP on a loopback port from this process (the fake engine, the
#: in-process gateways): a test that uses one, directly or through another fixture, is
#: marked slow, as one that starts a process is.
SERVER_FIXTURES = frozenset({"engine_server", "start_gateway"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that talk to a loopback server ``slow``."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def engine_server() -> Iterator[tuple[FakeEngine, str]]:
    engine = FakeEngine(max_model_len=ENGINE_MAX_MODEL_LEN)
    with serve_in_thread(engine.app) as url:
        yield engine, url


def _reset(fake: FakeEngine) -> None:
    """The engine as a test starts with: no script, no log, its standard models."""
    fake.script.clear()
    fake.requests.clear()
    fake.authorizations.clear()
    fake.headers.clear()
    fake.disconnects = 0
    fake.on_chunk = None
    fake.tokenize_delay = 0.0
    fake.tokenized = 0
    fake.served = ENGINE_MODELS
    fake.max_model_len = ENGINE_MAX_MODEL_LEN


@pytest.fixture
def engine(engine_server: tuple[FakeEngine, str]) -> Iterator[FakeEngine]:
    """The session's engine, reset before the test and again after it, so that a gateway
    a later module starts reads the standard engine, not what this test made of it."""
    fake = engine_server[0]
    _reset(fake)
    yield fake
    _reset(fake)


@pytest.fixture(scope="session")
def start_gateway(
    engine_server: tuple[FakeEngine, str], v41_tokenizer: str
) -> Iterator[Callable[..., str]]:
    """``start_gateway(**config)`` → the URL of a gateway in front of the fake engine
    (with the engine's own tokenizer unless ``tokenizer`` is given), started once per
    distinct config and kept for the session."""
    running: dict[tuple[tuple[str, object], ...], str] = {}
    with ExitStack() as stack:

        def start(**options: object) -> str:
            settings = {
                "upstream": engine_server[1],
                "upstream_timeout": TEST_UPSTREAM_TIMEOUT,
                "tokenizer": v41_tokenizer,
                **options,
            }
            key = tuple(sorted(settings.items()))
            if key not in running:
                app = create_app(ServerConfig(**settings))  # type: ignore[arg-type]
                running[key] = stack.enter_context(serve_in_thread(app))
            return running[key]

        yield start


#: The upstream kinds of hosted endpoints, each served by the fake engine.
HOSTED_KINDS = ("chat", "messages")


@pytest.fixture(scope="module")
def hosted_processes(engine_server: tuple[FakeEngine, str]) -> Iterator[dict[str, str]]:
    """A real ``dsmlkit serve`` per hosted upstream kind in front of the fake engine (no key
    of its own: the client's goes up), by kind, for one test module."""
    with ExitStack() as stack:
        yield {
            kind: stack.enter_context(
                serve_process("--upstream", engine_server[1], "--upstream-api", kind)
            )[1]
            for kind in HOSTED_KINDS
        }


def gateway_for_mode(mode: str, start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    """The gateway of an upstream ``mode``: ``completions`` (text prompts) or ``chat`` (the
    engine then serves the one model ``m``, as a hosted endpoint would)."""
    if mode == "chat":
        engine.served = ("m",)
        return Gateway(start_gateway(upstream_api="chat"), engine)
    return Gateway(start_gateway(upstream_api="completions", tokenizer="none"), engine)


@pytest.fixture
def completions_gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    return Gateway(start_gateway(upstream_api="completions"), engine)


@pytest.fixture
def chat_gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    engine.served = HOSTED_MODELS
    return Gateway(start_gateway(upstream_api="chat"), engine)


@pytest.fixture
def text_gateway(start_gateway: Callable[..., str], engine: FakeEngine) -> Gateway:
    """A completions-mode gateway that sends text prompts (so tests can read them)."""
    return Gateway(start_gateway(upstream_api="completions", tokenizer="none"), engine)


@pytest.fixture(scope="session")
def local_client(v41_tokenizer: str) -> Iterator[TestClient]:
    """The render-only server with a V4.1 tokenizer, in-process."""
    with TestClient(create_app(ServerConfig(tokenizer=v41_tokenizer))) as client:
        yield client


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
