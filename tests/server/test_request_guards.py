"""What a web page cannot make a default ``dsmlkit serve`` do (issue 26, item 7).

A page may send a cross-origin ``POST`` without asking the server first only with a
``text/plain``, form or multipart body: every ``POST`` route takes JSON media types only
(415 otherwise, in the route's API shape). A page whose name is pointed at 127.0.0.1 (DNS
rebinding) sends its own name as ``Host``: a server on loopback without ``--api-key``
answers loopback names only (403), ``--allowed-hosts`` adds names.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from dsmlkit.cli.serve_cmd import GATEWAY_ROUTES, LOCAL_ROUTES
from dsmlkit.server.config import ConfigError, ServerConfig, allowed_hosts
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

#: Every POST route of the server, as --help lists them.
POST_ROUTES = sorted(
    route.split(" ", 1)[1] for route in (*LOCAL_ROUTES, *GATEWAY_ROUTES) if route.startswith("POST")
)
#: Bodies a browser sends across origins without a preflight, and one with no type.
NOT_JSON = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x", None]
HUMAN = {"model": "deepseek-v4.1", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def server(engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    """A default server (loopback, no key) in front of the fake engine."""
    flags = ("--tokenizer", "none", "--upstream", engine_server[1])
    with serve_process(*flags) as (_, url):
        yield url


def _error(route: str, response: httpx.Response) -> dict[str, str]:
    """The error object of an answer, checked to be in the route's API shape."""
    body = response.json()
    if route.startswith("/v1/messages"):
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, str] = body["error"]
    return error


@pytest.mark.parametrize("content_type", NOT_JSON)
def test_a_body_that_is_not_json_typed_is_a_415_on_every_post_route(
    server: str, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    with httpx.Client(base_url=server, timeout=10) as http:
        for route in POST_ROUTES:
            response = http.post(route, content=b'{"text": "hi"}', headers=headers)
            assert response.status_code == 415, (route, response.text)
            error = _error(route, response)
            assert error["type"] == "invalid_request_error"
            assert "Content-Type: application/json" in error["message"]


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.x+json",
    ],
)
def test_json_media_types_are_taken(server: str, content_type: str) -> None:
    response = httpx.post(
        server + "/v1/parse", content=b'{"text": "hi"}', headers={"content-type": content_type}
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hi"


def test_the_sdks_still_reach_the_gateway(
    server: str, engine_server: tuple[FakeEngine, str]
) -> None:
    engine = engine_server[0]
    engine.push(Reply(text="Hm.</think>Hello."), Reply(text="Hello."))
    chat = openai.OpenAI(base_url=server + "/v1", api_key="k", max_retries=0)
    answer = chat.chat.completions.create(
        model="deepseek-v4.1", messages=[{"role": "user", "content": "Hi"}]
    )
    assert answer.choices[0].message.content == "Hello."
    messages = anthropic.Anthropic(base_url=server, api_key="k", max_retries=0)
    message = messages.messages.create(
        model="deepseek-v4.1", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
    )
    assert [block.type for block in message.content] == ["text"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_refused_on_every_route(server: str, host: str) -> None:
    routes = [("GET", "/ui"), ("GET", "/metrics"), ("GET", "/ready"), ("GET", "/v1/models")]
    routes += [("POST", route) for route in POST_ROUTES]
    with httpx.Client(base_url=server, timeout=10) as http:
        for method, route in routes:
            response = http.request(method, route, json=HUMAN, headers={"host": host})
            assert response.status_code == 403, (route, response.text)
            assert response.headers["x-should-retry"] == "false"
            error = _error(route, response)
            assert error["type"] == "permission_error"
            assert "--allowed-hosts" in error["message"]


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:1234", "app.localhost", "127.0.0.1", "127.9.9.9:80", "[::1]:8"]
)
def test_loopback_names_are_answered(server: str, host: str) -> None:
    response = httpx.get(server + "/ui", headers={"host": host})
    assert response.status_code == 200


def test_allowed_hosts_adds_names_and_star_allows_any() -> None:
    with serve_process("--tokenizer", "none", "--allowed-hosts", "gw.internal, 10.0.0.5") as (
        process,
        url,
    ):
        for host, status in [("gw.internal:8000", 200), ("10.0.0.5", 200), ("evil.example", 403)]:
            assert httpx.get(url + "/metrics", headers={"host": host}).status_code == status
        process.terminate()
        assert "hosts: loopback names, gw.internal, 10.0.0.5" in process.communicate()[0]
    with serve_process("--tokenizer", "none", env={"DSMLKIT_ALLOWED_HOSTS": "*"}) as (_, url):
        assert httpx.get(url + "/metrics", headers={"host": "any.example"}).status_code == 200


def test_an_api_key_server_answers_any_host() -> None:
    with serve_process("--tokenizer", "none", "--api-key", "k") as (_, url):
        response = httpx.get(
            url + "/v1/models", headers={"host": "gw.example", "authorization": "Bearer k"}
        )
        assert response.status_code == 200


def test_which_hosts_follow_from_the_flags() -> None:
    assert allowed_hosts(None, "127.0.0.1", None) == ()
    assert allowed_hosts(None, "::1", None) == ()
    assert allowed_hosts(None, "localhost", None) == ()
    assert allowed_hosts(None, "127.0.0.1", "key") is None
    assert allowed_hosts(None, "0.0.0.0", None) is None
    assert allowed_hosts("A.example,[::2]", "0.0.0.0", "key") == ("a.example", "::2")
    assert allowed_hosts("a.example,*", "127.0.0.1", None) is None
    for bad in ("a.example:80", "", "a,,b"):
        with pytest.raises(ConfigError, match="not a host name"):
            allowed_hosts(bad, "127.0.0.1", None)
    # --workers hands the settings over as JSON: a list comes back as a tuple
    assert ServerConfig(allowed_hosts=["a"]).allowed_hosts == ("a",)  # type: ignore[arg-type]
