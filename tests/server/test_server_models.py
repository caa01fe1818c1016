"""Several models from ``dsmlkit serve --config FILE``: routing by ``model``, listing, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from dsmlkit.cli import main
from dsmlkit.render.templates import SYSTEM
from dsmlkit.server import ServerConfig, create_app
from dsmlkit.server.config import load_config_file
from tests.server.conftest import Gateway
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.loopback import serve_in_thread

CONFIG = """
[[models]]
name = "v41"
aliases = ["deepseek-v4.1-latest", "claude-sonnet"]
dialect = "v4.1"
upstream = "{url}/v1"
upstream_model = "deepseek-v4.1"
tokenizer = "{tokenizer}"

[[models]]
name = "v4"
dialect = "v4"
upstream = "{url}"
upstream_model = "deepseek-v4"
"""


@pytest.fixture(scope="module")
def config_file(
    tmp_path_factory: pytest.TempPathFactory,
    engine_server: tuple[FakeEngine, str],
    v41_tokenizer: str,
) -> Path:
    path = tmp_path_factory.mktemp("config") / "models.toml"
    path.write_text(CONFIG.format(url=engine_server[1], tokenizer=v41_tokenizer))
    return path


@pytest.fixture(scope="module")
def gateway_url(config_file: Path, engine_server: tuple[FakeEngine, str]) -> Iterator[str]:
    engine_server[0].served = ("deepseek-v4.1", "deepseek-v4")
    app = create_app(ServerConfig(models=load_config_file(config_file), upstream_timeout=1.5))
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture
def gateway(gateway_url: str, engine: FakeEngine) -> Gateway:
    engine.served = ("deepseek-v4.1", "deepseek-v4")
    return Gateway(gateway_url, engine)


def test_every_name_is_listed_and_ready(gateway: Gateway) -> None:
    with gateway.http() as http:
        listed = http.get("/v1/models").json()["data"]
        ready = http.get("/ready")
    assert [card["id"] for card in listed] == [
        "v41",
        "deepseek-v4.1-latest",
        "claude-sonnet",
        "v4",
    ]
    assert ready.status_code == 200
    assert set(ready.json()["models"]) == {"v41", "v4"}


@pytest.mark.parametrize(
    ("name", "engine_model", "dialect_token"),
    [
        ("v41", "deepseek-v4.1", True),
        ("claude-sonnet", "deepseek-v4.1", True),
        ("v4", "deepseek-v4", False),
    ],
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_requests_route_by_model(
    gateway: Gateway, api: str, name: str, engine_model: str, dialect_token: bool
) -> None:
    gateway.engine.push(Reply(text="routed"))
    assert _ask(gateway, api, name) == "routed"
    sent = gateway.engine.requests[-1]
    assert sent["model"] == engine_model
    ids = (
        sent["prompt"]
        if isinstance(sent["prompt"], list)
        else gateway.engine.encode(sent["prompt"], False)
    )
    system_id = gateway.engine.tokenizer.token_to_id(SYSTEM)
    assert (system_id in ids) is dialect_token  # V4.1's system header, V4 has none


def _ask(gateway: Gateway, api: str, model: str) -> str:
    system = "Be brief."
    if api == "openai":
        completion = gateway.openai().chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
            extra_body={"chat_template_kwargs": {"thinking": False}},
        )
        return completion.choices[0].message.content or ""
    message = gateway.anthropic().messages.create(
        model=model, max_tokens=50, system=system, messages=[{"role": "user", "content": "hi"}]
    )
    block = message.content[0]
    return block.text if block.type == "text" else ""


def test_an_unknown_model_is_a_404_in_each_api(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        gateway.openai().chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "hi"}]
        )
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    assert "use one of: v41, deepseek-v4.1-latest, claude-sonnet, v4" in str(missing.value)
    with pytest.raises(anthropic.NotFoundError) as missing_a:
        gateway.anthropic().messages.create(
            model="gpt-4", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert missing_a.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with gateway.http() as http:
        assert http.post("/tokenize", json={"model": "gpt-4", "prompt": "x"}).status_code == 404
    assert not gateway.engine.requests


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[models]]\nname = 1\n", "models[0].name: must be a non-empty string"),
        ('[[models]]\nname = "a"\ndialect = "v4"\n', "models[0].upstream: is required"),
        (
            '[[models]]\nname = "a"\ndialect = "v9"\nupstream = "http://h"\n',
            "models[0].dialect: unknown dialect 'v9'",
        ),
        (
            '[[models]]\nname = "a"\ndialect = "v4"\nupstream = "http://h"\nport = 1\n',
            "models[0].port: unknown key",
        ),
        (
            '[[models]]\nname = "a"\ndialect = "v4"\nupstream = "http://h"\naliases = "b"\n',
            "models[0].aliases: must be a list of non-empty strings",
        ),
        (
            '[[models]]\nname = "a"\ndialect = "v4"\nupstream = "http://h"\n'
            'upstream_api = "grpc"\n',
            "models[0].upstream_api: must be 'completions' or 'chat' or 'messages'",
        ),
        ("models = [", "is not valid TOML"),
        ("[server]\nport = 1\n", "unknown top-level key 'server'"),
        ("", "models: needs at least one [[models]] table"),
    ],
)
def test_a_bad_config_is_one_line_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["serve", "--config", str(path)]) == 5
    error = capsys.readouterr().err
    assert error.startswith(f"dsmlkit serve: {path}: ")
    assert words in error and error.count("\n") == 1


def test_a_missing_config_file_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", "/no/such.toml"]) == 5
    assert "dsmlkit serve: /no/such.toml: cannot read it" in capsys.readouterr().err
