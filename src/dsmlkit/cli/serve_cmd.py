"""``dsmlkit serve``: the render endpoints, and with an upstream a DSML gateway.

FastAPI, uvicorn and aiohttp (the ``[server]`` extra) are imported only when the command
runs, so ``dsmlkit --help`` works without them. Every flag can also be given as an
environment variable: ``--upstream-timeout`` is ``DSMLKIT_UPSTREAM_TIMEOUT`` (``DSMLKIT_``
plus the flag's name in capitals, dashes as underscores); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets
import socket
from typing import TYPE_CHECKING, Any

from dsmlkit.cli import (
    DIALECT_HELP,
    DIALECT_METAVAR,
    EXIT_CONFIG,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_START,
    EXIT_USAGE,
    dialect_name,
    fail,
)
from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.errors import install_hint

if TYPE_CHECKING:
    from dsmlkit.server.state import ServerState

ENV_PREFIX = "DSMLKIT_"
#: The upstream's key comes only from the environment (so it never shows in `ps`).
UPSTREAM_KEY_ENV = "DSMLKIT_UPSTREAM_API_KEY"
#: The secret that signs Anthropic thinking blocks, likewise only from the environment.
STATE_SECRET_ENV = "DSMLKIT_STATE_SECRET"
#: Flags that describe the one model of the shorthand (not allowed with --config).
MODEL_FLAGS = ("dialect", "model", "upstream", "upstream_api", "tokenizer")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The routes every server answers, and the gateway's (with an upstream), as ``--help`` and
#: the start banner list them (a test checks them against the app's own routes).
LOCAL_ROUTES = (
    "GET|HEAD /health",
    "GET|HEAD /ready",
    "GET /v1/models",
    "GET /metrics",
    "POST /v1/chat/completions/render",
    "POST /v1/messages/render",
    "POST /v1/responses/render",
    "POST /tokenize",
    "POST /detokenize",
    "POST /v1/messages/count_tokens",
    "POST /v1/parse",
    "GET /ui",
    "GET /ui/inspector.js",
    "GET /ui/inspector.css",
)
GATEWAY_ROUTES = ("POST /v1/chat/completions", "POST /v1/messages", "POST /v1/responses")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1-65535)")
    return port


def _positive(kind: type[int] | type[float]) -> Any:
    """A flag type for a finite positive number (``nan`` and ``inf`` are refused)."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text} must be positive and finite")
        return value

    return convert


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        f"Serve the render, tokenize and parse endpoints ({', '.join(LOCAL_ROUTES)}). "
        f"With --upstream (or --config FILE for several models), also serve the gateway "
        f"({', '.join(GATEWAY_ROUTES)}) through an engine's /v1/completions "
        "(--upstream-api completions), a hosted chat endpoint whose leaked DSML is repaired "
        "(--upstream-api chat) or a hosted Anthropic Messages endpoint repaired the same way "
        "(--upstream-api messages). Every flag can also be set as DSMLKIT_<FLAG> (e.g. "
        "DSMLKIT_PORT, DSMLKIT_UPSTREAM). The documentation is docs/server.md in dsmlkit's "
        "source repository (the installed package carries no docs)."
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    add("--port", type=_port, default=8000, help="port, 1-65535 (default: 8000)")
    add("--config", metavar="FILE", help="TOML file with one [[models]] table per model")
    add(
        "--dialect",
        type=dialect_name,
        metavar=DIALECT_METAVAR,
        help=f"{DIALECT_HELP} (default: {DEFAULT_DIALECT.name})",
    )
    add(
        "--model",
        metavar="NAME",
        help="model name to list and to send upstream (default: the engine's served name, "
        "else deepseek-<dialect>; in chat and messages mode the client's model is forwarded "
        "unless given)",
    )
    add("--upstream", metavar="URL", help="engine base URL, e.g. http://127.0.0.1:8001/v1")
    add(
        "--upstream-api",
        # UPSTREAM_KINDS (server extra: not imported here)
        choices=("completions", "chat", "messages"),
        help="how to talk to the upstream (default: completions)",
    )
    add(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json or model folder (default: the bundled V4 tokenizer if "
        "the tokenizer extra is installed; 'none' sends text prompts)",
    )
    add(
        "--api-key",
        metavar="KEY",
        help="require this key as 'Authorization: Bearer KEY' or 'x-api-key' "
        "(default: $DSMLKIT_API_KEY, else no key)",
    )
    add(
        "--allowed-hosts",
        metavar="NAMES",
        help="comma-separated Host names answered besides the loopback ones (localhost, "
        "*.localhost, 127.0.0.1, [::1]); * answers any (default: bound to loopback with no "
        "--api-key, loopback names only; otherwise any)",
    )
    add(
        "--upstream-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=600.0,
        help="longest wait for the upstream's next bytes (default: 600)",
    )
    add(
        "--upstream-deadline",
        metavar="SECONDS",
        type=_positive(float),
        default=3600.0,
        help="longest time one upstream request may take in all (default: 3600)",
    )
    add(
        "--upstream-max-line-mb",
        metavar="MB",
        type=_positive(float),
        default=8.0,
        help="longest SSE line or event read from the upstream; a longer one ends the "
        "answer with a 502 (default: 8)",
    )
    add(
        "--header-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=10.0,
        help="close a connection whose request headers take longer (default: 10)",
    )
    add(
        "--body-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=60.0,
        help="answer 408 when a request body takes longer to arrive (default: 60)",
    )
    add(
        "--shutdown-grace",
        metavar="SECONDS",
        type=_positive(float),
        default=5.0,
        help="on SIGINT/SIGTERM, let requests run this long before open streams are ended "
        "with an error event (default: 5)",
    )
    add(
        "--max-body-mb",
        metavar="MB",
        type=_positive(float),
        default=32.0,
        help="largest request body accepted (default: 32)",
    )
    add(
        "--parse-max-deltas",
        metavar="N",
        type=_positive(int),
        default=20_000,
        help="most deltas a /v1/parse chunk_size may split its text into; more is a 400 "
        "saying which chunk_size fits (default: 20000)",
    )
    add(
        "--state",
        metavar="STORE",
        default="memory",
        help="where the gateway keeps reasoning between turns: memory (default), "
        "sqlite:PATH (survives restarts) or, shared by replicas, redis://HOST:PORT/DB, "
        "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] or "
        "redis+cluster://HOST:PORT[,HOST:PORT...]; "
        f"${STATE_SECRET_ENV} signs thinking blocks and seals Responses reasoning",
    )
    add(
        "--max-tokens-policy",
        choices=("clamp", "reject"),
        default="clamp",
        help="a max_tokens past what the engine's context leaves after the prompt: lower it "
        "to fit, noted in the x-dsmlkit-max-tokens-clamped header (clamp, default) or "
        "answer 400 (reject)",
    )
    add(
        "--images",
        choices=("route", "refuse"),
        default="route",
        help="a request with images to a completions upstream (whose /v1/completions takes "
        "none): send that request to the engine's chat endpoint, which renders it (route, "
        "default; the x-dsmlkit-upstream header says so), or answer 400 naming the image "
        "(refuse)",
    )
    add(
        "--state-max-mb",
        metavar="MB",
        type=_positive(float),
        default=256.0,
        help="most memory the memory state store holds; the least recently used entries "
        "go first (default: 256)",
    )
    add("--workers", type=_positive(int), default=1, help="worker processes (default: 1)")
    add("--log-level", choices=LOG_LEVELS, default="info", help="(default: info)")
    add(
        "--log-format",
        choices=("json", "text"),
        default="json",
        help="one JSON object per log line, or one line of text (default: json)",
    )
    _defaults_from_environment(parser)
    parser.set_defaults(func=run)


def _defaults_from_environment(parser: argparse.ArgumentParser) -> None:
    """Take each flag's default from ``DSMLKIT_<FLAG>`` when that variable is set.

    A string default goes through the flag's ``type`` when argparse parses, so a bad value
    fails like a bad flag; choices are checked here (argparse does not check defaults).
    """
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        name = ENV_PREFIX + action.dest.upper()
        value = os.environ.get(name)
        if value is None:
            continue
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(map(str, action.choices))
            parser.error(f"{name}={value!r}: must be one of {allowed}")
        if callable(action.type):
            try:
                action.type(value)
            except argparse.ArgumentTypeError as exc:
                parser.error(f"{name}={value!r}: {exc}")
        action.default = value


def _setting_name(where: str | None) -> str:
    """How the user set the ``ServerConfig`` field ``where``: its flag, or the variable of
    a setting taken only from the environment (the prefix of an error message)."""
    if where is None:
        return ""
    given = {
        "max_body_bytes": "--max-body-mb",
        "state_max_bytes": "--state-max-mb",
        "state_secret": f"${STATE_SECRET_ENV}",
    }
    return given.get(where, "--" + where.replace("_", "-")) + ": "


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401

        from dsmlkit.server import ServerConfig, create_app
        from dsmlkit.server.config import ConfigError, allowed_hosts, load_config_file
        from dsmlkit.server.runtime import configure_logging, metrics_directory, serve
        from dsmlkit.server.state_store import StateSettingError, per_process
        from dsmlkit.server.upstream_kinds import DEFAULT_UPSTREAM_KIND
    except ImportError as exc:
        missing = f"needs the server extra ({exc.name} is missing)"
        return fail("serve", f"{missing}: {install_hint('server')}", EXIT_START)
    settings: dict[str, Any] = {}
    if args.config is not None:
        given = [f"--{flag.replace('_', '-')}" for flag in MODEL_FLAGS if getattr(args, flag)]
        if given:
            return fail(
                "serve", f"--config FILE lists the models; drop {', '.join(given)}", EXIT_USAGE
            )
        try:
            settings["models"] = load_config_file(args.config)
        except ConfigError as exc:
            return fail("serve", str(exc), EXIT_CONFIG)
    else:
        settings.update(
            dialect=args.dialect or DEFAULT_DIALECT.name,
            model=args.model,
            upstream=args.upstream,
            upstream_api=args.upstream_api or DEFAULT_UPSTREAM_KIND,
            tokenizer=args.tokenizer,
        )
    if args.workers > 1 and per_process(args.state):
        return fail(
            "serve",
            f"--workers {args.workers} with --state {args.state}: each worker would keep its "
            "own state and share none of it; use --state sqlite:PATH or --state "
            "redis://HOST:PORT/DB",
            EXIT_CONFIG,
        )
    if args.workers > 1 and not os.environ.get(STATE_SECRET_ENV):
        # one key for every worker (each would draw its own): they inherit the environment
        os.environ[STATE_SECRET_ENV] = secrets.token_hex(32)
    try:
        config = ServerConfig(
            **settings,
            allowed_hosts=allowed_hosts(args.allowed_hosts, args.host, args.api_key or None),
            api_key=args.api_key or None,
            upstream_api_key=os.environ.get(UPSTREAM_KEY_ENV) or None,
            upstream_timeout=args.upstream_timeout,
            upstream_deadline=args.upstream_deadline,
            upstream_max_line_bytes=int(args.upstream_max_line_mb * 1024 * 1024),
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            body_timeout=args.body_timeout,
            shutdown_grace=args.shutdown_grace,
            state=args.state,
            state_max_bytes=int(args.state_max_mb * 1024 * 1024),
            state_secret=os.environ.get(STATE_SECRET_ENV) or None,
            max_tokens_policy=args.max_tokens_policy,
            images=args.images,
            parse_max_deltas=args.parse_max_deltas,
        )
    except ConfigError as exc:
        return fail("serve", _setting_name(exc.where) + exc.reason, EXIT_USAGE)
    try:
        metrics_dir = metrics_directory(args.workers)  # before any metric is made
    except ConfigError as exc:
        return fail("serve", str(exc), EXIT_START)
    try:
        app = create_app(config)
    except StateSettingError as exc:  # its message names --state
        return fail("serve", str(exc), EXIT_USAGE)
    except Exception as exc:  # a tokenizer that cannot be loaded, reported plainly
        return fail("serve", f"--tokenizer: {exc}", EXIT_INPUT)
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        return fail("serve", f"cannot listen on {args.host}:{args.port}: {exc}", EXIT_START)
    configure_logging(args.log_level, args.log_format)
    state: ServerState = app.state.dsmlkit
    asyncio.run(_read_engines(state, served_here=args.workers == 1))
    mismatches = [f"model {m.name}: {m.name_mismatch()}" for m in state.models if m.name_mismatch()]
    if mismatches:
        sock.close()
        return fail("serve", "; ".join(mismatches), EXIT_START)
    problems = [f"model {m.name}: {p}" for m in state.models for p in m.problems()]
    host, port = sock.getsockname()[:2]
    print(_banner(host, port, state, problems), flush=True)
    target: Any = app
    if args.workers > 1:
        from dsmlkit.server.runtime import (
            CONFIG_ENV,
            LOG_FORMAT_ENV,
            LOG_LEVEL_ENV,
            settings_to_environment,
        )

        os.environ[CONFIG_ENV] = settings_to_environment(config)
        os.environ[LOG_LEVEL_ENV] = args.log_level
        os.environ[LOG_FORMAT_ENV] = args.log_format
        target = "dsmlkit.server.runtime:app_from_environment"
    with metrics_dir:
        serve(
            target,
            sock,
            workers=args.workers,
            log_level=args.log_level,
            header_timeout=args.header_timeout,
        )
    return EXIT_OK


async def _read_engines(state: ServerState, *, served_here: bool) -> None:
    """Read the engines for the banner, in an event loop of its own: the upstream client
    is closed after; the state store stays open when this process serves the app, and is
    closed when the ``--workers`` processes open their own."""
    try:
        await state.read_engines()
    finally:
        await (state.close_upstream() if served_here else state.aclose())


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket whose connections send small writes at once (TCP_NODELAY).

    Accepted connections inherit the option; without it, a response's headers and body
    (or two SSE events) written separately wait ~40 ms for the peer's delayed ACK.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _banner(host: str, port: int, state: ServerState, problems: list[str]) -> str:
    config = state.config
    shown_host = f"[{host}]" if ":" in host else host
    lines = [
        f"dsmlkit serve: listening on http://{shown_host}:{port}",
        f"  always on: {', '.join(LOCAL_ROUTES)}",
        f"  inspector: http://{shown_host}:{port}/ui",
    ]
    for model in state.models:
        names = ", ".join(model.config.names)
        lines.append(f"  model {names}: dialect {model.dialect}")
        endpoint = model.config.shown_endpoint
        if endpoint is None:
            lines.append("    gateway: off (no --upstream)")
        else:
            engine = model.engine_model or "(the client's model)"
            length = model.max_model_len or "unknown"
            lines.append(
                f"    gateway: {', '.join(GATEWAY_ROUTES)} -> {endpoint} "
                f"({model.config.upstream_api}, model {engine}, max_model_len {length})"
            )
        lines.append(f"    prompts: {model.plan.summary}")
    lines.append(f"  state: {state.reasoning.store.description}")
    lines += [f"  NOT READY: {problem}" for problem in problems]
    lines.append(f"  API key: {'required' if config.api_key else 'not required'}")
    hosts = config.allowed_hosts
    if hosts is None:
        lines.append("  hosts: any Host header")
    else:
        names = ", ".join(("loopback names", *hosts)) if hosts else "loopback names only"
        lines.append(f"  hosts: {names} (--allowed-hosts adds names)")
    if config.api_key is None and not _is_loopback(host):
        lines.append(f"  WARNING: {host} is not loopback and no --api-key is set")
    return "\n".join(lines)


def _is_loopback(host: str) -> bool:
    from dsmlkit.server.config import host_name, is_loopback_name  # run() loaded it

    return is_loopback_name(host_name(host))
