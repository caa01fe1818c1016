"""The inspector's server side: the static page at ``/ui``, ``/v1/parse`` with an event
stream (``chunk_size``) and the render routes' ``special_spans``. The page itself is
driven in a real browser in ``test_inspector_browser.py``."""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN
from dsmlkit.server import ServerConfig, create_app
from dsmlkit.server.inspector import PAGE_FILES

PAGE_DIR = files("dsmlkit.server").joinpath("ui")
VECTORS = json.loads((Path(__file__).parents[1] / "data" / "parse.json").read_text("utf-8"))

SEED = (
    '\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="note">\n'
    '<｜DSML｜ parameter name="body" string="true">Closing tag </｜DSML｜ parameter> inside'
    "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"
)


@pytest.mark.parametrize("path", sorted(PAGE_FILES))
def test_page_files_are_served_with_a_strict_policy(local_client: TestClient, path: str) -> None:
    answer = local_client.get(path)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == PAGE_FILES[path][1]
    policy = answer.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "script-src 'self'" in policy
    assert answer.content == PAGE_DIR.joinpath(PAGE_FILES[path][0]).read_bytes()


@pytest.mark.parametrize("name", sorted(name for name, _ in PAGE_FILES.values()))
def test_page_loads_nothing_from_elsewhere(name: str) -> None:
    text = PAGE_DIR.joinpath(name).read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert not re.search(r"""(?:fetch\(|url\()\s*["']?(?:https?:)?//""", text)
    assert "@import" not in text
    assert "innerHTML" not in text  # model text only ever goes in as text nodes


@pytest.mark.slow
def test_page_needs_no_key_but_the_routes_it_calls_do() -> None:
    with TestClient(create_app(ServerConfig(api_key="k" * 12))) as client:
        assert client.get("/ui").status_code == 200
        assert client.get("/ui/inspector.js").status_code == 200
        assert client.post("/v1/parse", json={"text": "hi"}).status_code == 401
        keyed = client.post(
            "/v1/parse", json={"text": "hi"}, headers={"authorization": "Bearer " + "k" * 12}
        )
        assert keyed.status_code == 200


def test_page_references_only_what_is_served() -> None:
    html = PAGE_DIR.joinpath("index.html").read_text(encoding="utf-8")
    for reference in re.findall(r"""(?:src|href)="([^"]+)\"""", html):
        assert reference in PAGE_FILES


def test_parse_stream_replays_the_deltas_and_agrees_with_the_message(
    local_client: TestClient,
) -> None:
    answer = local_client.post("/v1/parse", json={"text": SEED, "chunk_size": 7}).json()
    stream = answer["stream"]
    deltas = [step["delta"] for step in stream]
    assert deltas[-1] is None  # close()
    assert "".join(deltas[:-1]) == SEED
    assert all(len(delta) <= 7 for delta in deltas[:-1])
    events = [event for step in stream for event in step["events"]]
    ends = [event for event in events if event["type"] == "tool_call_end"]
    assert len(ends) == 1
    assert ends[0]["arguments"] == {"body": "Closing tag </｜DSML｜ parameter> inside"}
    fragments = "".join(e["text"] for e in events if e["type"] == "arguments")
    assert fragments == ends[0]["arguments_json"]
    call = answer["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == ends[0]["arguments"]
    assert events[-1] == {"type": "output_end", "finish_reason": "tool_calls"}


def test_parse_stream_is_the_same_message_in_every_chunking(local_client: TestClient) -> None:
    vectors = [v for v in VECTORS["vectors"] if "options" not in v][:16]
    assert len(vectors) == 16
    for vector in vectors:
        start_in = "reasoning" if vector["mode"] == "thinking" else "content"
        body = {"text": vector["text"], "dialect": vector["version"], "start_in": start_in}
        whole = local_client.post("/v1/parse", json=body).json()
        for size in (1, 5):
            chunked = local_client.post("/v1/parse", json={**body, "chunk_size": size}).json()
            assert chunked.pop("stream")
            for key in ("id", "created"):
                chunked.pop(key)
                whole.pop(key, None)
            message = chunked["choices"][0]["message"]
            for call in message.get("tool_calls") or []:
                call.pop("id")
            for call in whole["choices"][0]["message"].get("tool_calls") or []:
                call.pop("id", None)
            assert chunked == whole, vector["id"]


def test_parse_without_chunk_size_has_no_stream(local_client: TestClient) -> None:
    assert "stream" not in local_client.post("/v1/parse", json={"text": "hi"}).json()


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True])
def test_parse_rejects_a_bad_chunk_size(local_client: TestClient, bad: object) -> None:
    answer = local_client.post("/v1/parse", json={"text": "hi", "chunk_size": bad})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "chunk_size"


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (
            "/v1/chat/completions/render",
            {"model": "m", "messages": [{"role": "user", "content": "Hi <｜User｜> there"}]},
        ),
        (
            "/v1/messages/render",
            {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]},
        ),
        ("/v1/responses/render", {"model": "m", "input": "Hi"}),
    ],
)
def test_render_reports_where_the_special_tokens_are(
    local_client: TestClient, route: str, body: dict[str, object]
) -> None:
    answer = local_client.post(route, json=body).json()
    prompt, spans = answer["prompt"], answer["special_spans"]
    assert spans
    assert spans == sorted(spans)
    for start, end in spans:
        assert SPECIAL_TOKEN_PATTERN.fullmatch(prompt[start:end])
    flagged = {start for start, _ in spans}
    template_tokens = [m.start() for m in SPECIAL_TOKEN_PATTERN.finditer(prompt)]
    # Every special token the template wrote is flagged; one the user typed is not.
    assert flagged <= set(template_tokens)
    user_token = prompt.find("Hi <｜User｜> there")
    if user_token >= 0:
        assert user_token + 3 not in flagged
        assert len(flagged) == len(template_tokens) - 1
    else:
        assert len(flagged) == len(template_tokens)
