"""Several ``dsmlkit serve`` processes on one Redis Sentinel or Redis Cluster, each started
here from Debian's ``redis-server`` / ``redis-sentinel``, with the official OpenAI SDK as
the client: a conversation alternating between two gateways continues every turn,
reasoning sealed by one opens on the other, what the model wrote is restored by either,
and both follow a Sentinel failover. A Redis URL option dsmlkit does not take is refused
at start."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import openai
import pytest
import redis

from dsmlkit.cli import EXIT_USAGE
from dsmlkit.server.state_store import RedisSetting, StateSettingError, open_store
from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import free_port, serve_process
from tests.server.redis_server import (
    SERVICE,
    SentinelSetup,
    node_ports,
    redis_cluster,
    redis_sentinel,
)
from tests.server.test_reasoning_roundtrip import TOOLS as CHAT_FORM_TOOLS
from tests.server.test_sealed_reasoning import follow_up, reasoning_item
from tests.server.test_server_responses_state import CALL_TEXT, REASONING, TOOLS

# Real processes (dsmlkit serve, Redis).
pytestmark = pytest.mark.slow

SERVE = (sys.executable, "-m", "dsmlkit", "serve", "--tokenizer", "none")
#: The tools as the Chat Completions SDK's typed parameter takes them.
CHAT_TOOLS: Any = CHAT_FORM_TOOLS


@contextmanager
def _gateways(engine_url: str, state: str, count: int = 2) -> Iterator[list[str]]:
    """``count`` separate ``dsmlkit serve`` processes on the store ``state``, one secret."""
    secret = {"DSMLKIT_STATE_SECRET": secrets.token_hex(32)}
    flags = ("--upstream", engine_url, "--tokenizer", "none", "--state", state)
    with ExitStack() as stack:
        yield [stack.enter_context(serve_process(*flags, env=secret))[1] for _ in range(count)]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=CLIENT_TIMEOUT)


def _prompt(engine: FakeEngine) -> str:
    sent: str = engine.requests[-1]["prompt"]
    return sent


def _converse(urls: list[str], engine: FakeEngine, turns: range, previous: str | None) -> str:
    """Responses turns continuing ``previous`` by ``previous_response_id``, turn n on
    gateway n % 2; each prompt must hold every earlier turn. The last response's id."""
    for turn in turns:
        engine.push(Reply(text=f"Answer {turn}."))
        linked: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        answer = _client(urls[turn % len(urls)]).responses.create(
            model="m", input=f"Question {turn}?", reasoning={"effort": "none"}, **linked
        )
        assert answer.output_text == f"Answer {turn}."
        said = [f"Question {t}?" for t in range(turn + 1)] + [f"Answer {t}." for t in range(turn)]
        missing = [text for text in said if text not in _prompt(engine)]
        assert not missing, f"turn {turn} on gateway {turn % len(urls)} lost {missing}"
        previous = answer.id
    assert previous is not None
    return previous


def _seal_on_one_open_on_the_other(urls: list[str], engine: FakeEngine) -> None:
    """Reasoning sealed by either gateway opens on the other: the call id of the follow-up
    is one no store holds, so the token alone brings the reasoning back."""
    for sealer, opener in ((urls[0], urls[1]), (urls[1], urls[0])):
        engine.push(Reply(text=CALL_TEXT))
        first = _client(sealer).responses.create(
            model="m",
            input="Weather in Paris?",
            tools=TOOLS,
            store=False,
            include=["reasoning.encrypted_content"],
        )
        history = follow_up(first, reasoning_item(first), call_id="call_" + secrets.token_hex(12))
        engine.push(Reply(text="</think>Sunny."))
        _client(opener).responses.create(model="m", input=history, tools=TOOLS, store=False)
        assert REASONING + "</think>" in _prompt(engine)


def _restore_by_call_id(urls: list[str], engine: FakeEngine, calls: int = 4) -> None:
    """Chat turns calling get_weather on alternate gateways, their reasoning left out of
    the history sent back: the other gateway reads all of it from the store (one read of
    ``calls`` keys)."""
    history: list[Any] = []
    for turn in range(calls):
        history.append({"role": "user", "content": f"Weather in city {turn}?"})
        engine.push(Reply(text=f"Plan {turn}: call get_weather." + CALL_TEXT[len(REASONING) :]))
        answer = _client(urls[turn % 2]).chat.completions.create(
            model="m", messages=history, tools=CHAT_TOOLS
        )
        [call] = answer.choices[0].message.tool_calls or []
        history.append(answer.choices[0].message.model_dump(exclude_none=True))
        history.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    engine.push(Reply(text="</think>Sunny everywhere."))
    _client(urls[calls % 2]).chat.completions.create(model="m", messages=history, tools=CHAT_TOOLS)
    seen = _prompt(engine)
    assert all(f"Plan {turn}: call get_weather.</think>" in seen for turn in range(calls)), seen


def test_two_gateways_on_one_redis_cluster_share_every_conversation(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine
) -> None:
    with redis_cluster() as setting, _gateways(engine_server[1], setting) as urls:
        assert all(httpx.get(url + "/ready").json()["state"]["ok"] for url in urls)
        _converse(urls, engine, range(8), None)
        _seal_on_one_open_on_the_other(urls, engine)
        _restore_by_call_id(urls, engine)
        held = []
        for port in node_ports(setting):
            with redis.Redis(port=port) as node:
                held.append(len(node.keys("dsmlkit:*")))
    # the reads above took keys of several nodes (one MGET per slot, not one MGET)
    assert sum(1 for count in held if count) >= 2, held
    assert sum(held) == 8 + 2 + 4, held  # 8 responses; 2 sealed and 4 chat turns' calls


def test_two_gateways_on_one_sentinel_share_every_conversation_and_follow_a_failover(
    engine_server: tuple[FakeEngine, str], engine: FakeEngine
) -> None:
    with redis_sentinel() as setup, _gateways(engine_server[1], setup.url) as urls:
        assert all(httpx.get(url + "/ready").json()["state"]["ok"] for url in urls)
        last = _converse(urls, engine, range(6), None)
        _seal_on_one_open_on_the_other(urls, engine)
        _restore_by_call_id(urls, engine)
        _fail_over(setup)
        hidden = [str(port) for port in (setup.master, setup.replica, setup.sentinel)]
        for url in urls:  # each gateway finds the new master once its back-off ends
            _wait_until_continued(url, engine, last, hidden)
        _converse(urls, engine, range(6, 12), last)


def _fail_over(setup: SentinelSetup) -> None:
    """Once the replica holds every write, stop the master (as a crash would) and wait
    until the Sentinel names the replica the master."""
    with redis.Redis(port=setup.master) as master:
        master.set("replicated", "1")
        assert master.wait(1, 5000) == 1
        setup.master_process.kill()
    with redis.Redis(port=setup.sentinel, decode_responses=True) as sentinel:
        deadline = time.monotonic() + 30
        while sentinel.sentinel_get_master_addr_by_name(SERVICE)[1] != setup.replica:
            assert time.monotonic() < deadline, "the Sentinel did not fail over"
            time.sleep(0.1)


def _wait_until_continued(url: str, engine: FakeEngine, previous: str, hidden: list[str]) -> None:
    """Continue ``previous`` on the gateway at ``url`` until it answers, within 15 s: a
    503 naming none of the ``hidden`` ports while it backs off from the dead master."""
    deadline = time.monotonic() + 15
    while True:
        engine.push(Reply(text="Still here."))
        answer = httpx.post(
            url + "/v1/responses",
            json={"model": "m", "input": "Still there?", "previous_response_id": previous},
            timeout=CLIENT_TIMEOUT,
        )
        if answer.status_code == 200:
            assert "Question 5?" in _prompt(engine)
            return
        assert answer.status_code == 503, answer.text
        assert not [port for port in hidden if port in answer.text], answer.text
        engine.script.clear()
        assert time.monotonic() < deadline, "the gateway did not find the new master"
        time.sleep(0.25)


def test_a_redis_url_option_dsmlkit_does_not_take_is_refused_at_start() -> None:
    """``?cluster=true`` made a plain client (whose every call then failed): now it stops
    the start, saying how to name a Cluster."""
    setting = f"redis://127.0.0.1:{free_port()}/0?cluster=true"
    done = subprocess.run(
        [*SERVE, "--port", str(free_port()), "--state", setting],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.startswith("dsmlkit serve: --state: the Redis URL option 'cluster' is")
    assert "redis+cluster://HOST:PORT" in done.stderr


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("redis://h:1/0?socket_timeout=9", "option 'socket_timeout' is not one dsmlkit takes"),
        ("redis://h:1/0?ssl_ca_certs=x", "option 'ssl_ca_certs' is not one"),
        ("redis+sentinel://h:1", "needs the service the Sentinels watch"),
        ("redis+sentinel://h:1/svc/x", "needs the service the Sentinels watch"),
        ("redis+cluster://h:1/3", "a Redis Cluster has only database 0"),
        ("redis+cluster://h:1,:5", "':5' is not HOST or HOST:PORT"),
        ("redis+cluster://h:99999", "'h:99999' is not HOST or HOST:PORT"),
    ],
)
def test_a_redis_setting_dsmlkit_cannot_use_says_what_is_wrong(setting: str, said: str) -> None:
    with pytest.raises(StateSettingError) as raised:
        open_store(setting)
    assert str(raised.value).startswith("--state"), raised.value
    assert said in str(raised.value)


def test_the_redis_settings_name_their_nodes_without_the_password() -> None:
    cluster = RedisSetting.parse("redis+cluster://:pw@[::1]:7000,h2?max_connections=9")
    assert cluster.nodes == (("::1", 7000), ("h2", 6379))
    assert cluster.description == "redis+cluster://[::1]:7000,h2:6379"
    assert cluster.url == "redis://:pw@[::1]:7000/0?max_connections=9"
    sentinel = RedisSetting.parse("redis+sentinel://u:pw@s1,s2:26380/main/2")
    assert (sentinel.service, sentinel.nodes) == ("main", (("s1", 26379), ("s2", 26380)))
    assert sentinel.description == "redis+sentinel://s1:26379,s2:26380/main/2"
    assert "pw" not in sentinel.description and sentinel.url == "redis://u:pw@s1:26379/2"
