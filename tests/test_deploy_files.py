"""The container image's files (Dockerfile, compose.yaml, deploy/kubernetes.yaml) read as
their tools read them and name what ``dsmlkit serve`` really has: its default port, its
``/health`` and ``/ready`` routes, the extras in pyproject.toml, environment variables that
are flags (``DSMLKIT_<FLAG>``) or the state secret, and one user id that is not root.

``.ci/image`` builds and runs the image itself where podman is installed."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsmlkit.cli.serve_cmd import ENV_PREFIX, STATE_SECRET_ENV, UPSTREAM_KEY_ENV, configure
from dsmlkit.server.state_store import RedisSetting

ROOT = Path(__file__).parent.parent
DOCKERFILE = ROOT / "Dockerfile"


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser


def _environment_names() -> set[str]:
    """Every variable ``dsmlkit serve`` reads: one per flag, and the two secrets."""
    flags = {ENV_PREFIX + a.dest.upper() for a in _serve_parser()._actions if a.option_strings}
    return flags | {STATE_SECRET_ENV, UPSTREAM_KEY_ENV}


PORT = _serve_parser().get_default("port")


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, (KEYWORD, arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text("utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    pairs = [line.split(None, 1) for line in lines if line and not line.startswith("#")]
    return [(pair[0].upper(), pair[1] if len(pair) > 1 else "") for pair in pairs]


def _one(keyword: str) -> str:
    [found] = [args for word, args in _instructions() if word == keyword]
    return found


def _uid() -> int:
    user = _one("USER")
    assert user.isdigit() and int(user) != 0, user  # a number: runAsNonRoot can check it
    useradd = next(args for word, args in _instructions() if "useradd" in args)
    assert f"--uid {user}" in useradd, useradd
    return int(user)


def test_the_dockerfile_builds_a_slim_python_image_that_serves_on_the_default_port() -> None:
    words = [word for word, _ in _instructions()]
    known = {"ARG", "FROM", "COPY", "RUN", "ENV", "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT"}
    assert set(words) <= known, set(words) - known
    base = re.fullmatch(r"PYTHON_IMAGE=(\S+)", _instructions()[0][1])
    assert base and re.fullmatch(r"python:3\.1\d-slim", base.group(1)), _instructions()[0]
    assert all(a.startswith("${PYTHON_IMAGE}") for w, a in _instructions() if w == "FROM")
    install = next(args for word, args in _instructions() if "pip install" in args)
    extras = re.search(r"\[([a-z,]+)\]", install)
    assert extras and extras.group(1) == "server,tokenizer", install
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert all(f"\n{extra} = [" in pyproject for extra in extras.group(1).split(","))
    assert _uid() > 0
    assert _one("EXPOSE") == str(PORT)
    command = json.loads(_one("ENTRYPOINT"))
    assert command == ["dsmlkit", "serve", "--host", "0.0.0.0", "--port", str(PORT)]
    health = _one("HEALTHCHECK")
    assert f"http://127.0.0.1:{PORT}/health" in health, health
    probe = json.loads(health.split("CMD", 1)[1])
    assert probe[:2] == ["python3", "-c"]
    compile(probe[2], "HEALTHCHECK", "exec")


def test_the_image_leaves_out_what_it_does_not_install() -> None:
    ignored = (ROOT / ".dockerignore").read_text("utf-8").split()
    assert {".git", "tests", "bench"} <= set(ignored)
    needed = ["src", "pyproject.toml", "setup.py", "README.md", "LICENSE", "_build"]
    assert not [name for name in needed if name in ignored]


def _variables(items: Any) -> dict[str, Any]:
    """Environment entries as a mapping (compose's mapping or Kubernetes' list)."""
    if isinstance(items, dict):
        return items
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in items}


def test_compose_runs_the_image_with_redis_and_variables_the_server_reads() -> None:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text("utf-8"))["services"]
    gateway = services["dsmlkit"]
    assert gateway["build"] == "." and gateway["ports"] == [f"{PORT}:{PORT}"]
    environment = _variables(gateway["environment"])
    assert set(environment) <= _environment_names(), set(environment) - _environment_names()
    store = RedisSetting.parse(environment["DSMLKIT_STATE"])
    assert store.scheme == "redis" and "//redis:6379/" in store.url
    assert "redis" in services and gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    assert environment[STATE_SECRET_ENV].startswith("${DSMLKIT_STATE_SECRET:?")


def test_the_kubernetes_example_probes_the_routes_and_takes_the_secret_from_a_secret() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy/kubernetes.yaml").read_text("utf-8")))
    [deployment] = [d for d in documents if d["kind"] == "Deployment"]
    [service] = [d for d in documents if d["kind"] == "Service"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": _uid()}
    [container] = pod["containers"]
    assert container["ports"] == [{"name": "http", "containerPort": PORT}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    environment = _variables(container["env"])
    assert set(environment) <= _environment_names(), set(environment) - _environment_names()
    assert environment[STATE_SECRET_ENV] == {
        "secretKeyRef": {"name": "dsmlkit", "key": "state-secret"}
    }
    RedisSetting.parse(environment["DSMLKIT_STATE"])
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == labels == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("path", ["/health", "/ready"])
def test_the_probed_routes_answer_without_a_key(path: str) -> None:
    """Probes send no key: both routes stay open on a server with ``--api-key``."""
    from fastapi.testclient import TestClient

    from dsmlkit.server import ServerConfig, create_app

    app = create_app(ServerConfig(tokenizer="none", api_key="k", allowed_hosts=None))
    with TestClient(app) as client:
        assert client.get(path).status_code == 200
