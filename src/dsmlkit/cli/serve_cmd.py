"""``dsmlkit serve``: the render endpoints, and with ``--upstream`` a DSML gateway.

FastAPI, uvicorn and httpx (the ``[server]`` extra) are imported only when the command
runs, so ``dsmlkit --help`` works without them.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from dsmlkit.dialects import DIALECTS

if TYPE_CHECKING:
    from dsmlkit.server import ServerConfig

INSTALL_HINT = "pip install 'dsmlkit[server]'"
#: Environment variables read for secrets (so keys need not appear in `ps` output).
API_KEY_ENV = "DSMLKIT_API_KEY"
UPSTREAM_KEY_ENV = "DSMLKIT_UPSTREAM_API_KEY"
STATE_ENV = "DSMLKIT_STATE"
STATE_SECRET_ENV = "DSMLKIT_STATE_SECRET"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve render/tokenize/parse endpoints and, with --upstream, a DSML gateway",
        description=(
            "Serve the render, tokenize and parse endpoints. With --upstream, also serve "
            "POST /v1/chat/completions and POST /v1/messages through an engine's "
            "/v1/completions (--upstream-api completions) or a hosted chat endpoint whose "
            "leaked DSML is repaired (--upstream-api chat). See docs/server.md."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--dialect", choices=list(DIALECTS), default="v4.1", help="DSML dialect (default: v4.1)"
    )
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="model name to list and to send upstream (default: deepseek-<dialect>; "
        "in chat mode the client's model is forwarded unless this is given)",
    )
    parser.add_argument(
        "--upstream", metavar="URL", help="engine base URL, e.g. http://127.0.0.1:8001/v1"
    )
    parser.add_argument(
        "--upstream-api",
        choices=("completions", "chat"),
        default="completions",
        help="how to talk to the upstream (default: completions)",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json or model folder (default: the bundled V4 tokenizer if "
        "dsmlkit[tokenizer] is installed; 'none' sends text prompts)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get(API_KEY_ENV),
        help=f"require this key as 'Authorization: Bearer KEY' or 'x-api-key' "
        f"(default: ${API_KEY_ENV}, else no key)",
    )
    parser.add_argument(
        "--upstream-timeout",
        metavar="SECONDS",
        type=float,
        default=600.0,
        help="longest wait for the upstream's next bytes (default: 600)",
    )
    parser.add_argument(
        "--max-body-mb",
        metavar="MB",
        type=float,
        default=32.0,
        help="largest request body accepted (default: 32)",
    )
    parser.add_argument(
        "--state",
        metavar="STORE",
        default=os.environ.get(STATE_ENV, "memory"),
        help="where the gateway keeps reasoning between turns: memory (default), "
        "sqlite:PATH (survives restarts) or redis://HOST:PORT/DB (shared by replicas); "
        f"default: ${STATE_ENV}, else memory. ${STATE_SECRET_ENV} signs thinking blocks "
        "and seals Responses reasoning",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from dsmlkit.server import ServerConfig, create_app
    except ImportError as exc:
        print(
            f"dsmlkit serve needs the server extra ({exc.name} is missing): {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    try:
        config = ServerConfig(
            dialect=args.dialect,
            model=args.model,
            upstream=args.upstream,
            upstream_api=args.upstream_api,
            tokenizer=args.tokenizer,
            api_key=args.api_key or None,
            upstream_api_key=os.environ.get(UPSTREAM_KEY_ENV) or None,
            upstream_timeout=args.upstream_timeout,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            state=args.state,
            state_secret=os.environ.get(STATE_SECRET_ENV) or None,
        )
    except ValueError as exc:
        print(f"dsmlkit serve: {exc}", file=sys.stderr)
        return 2
    try:
        app = create_app(config)
    except Exception as exc:  # a tokenizer that cannot be loaded, reported plainly
        print(f"dsmlkit serve: {exc}", file=sys.stderr)
        return 1
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        print(f"dsmlkit serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    _log_requests_to_stderr()
    server_state = app.state.dsmlkit
    banner = _banner(args.host, args.port, config, server_state.tokenizer_description)
    print(f"{banner}\n  state: {server_state.reasoning.store.description}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning"))
    server.run(sockets=[sock])
    return 0


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


def _log_requests_to_stderr() -> None:
    """One JSON line per request on stderr (the lines are JSON already)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("dsmlkit.server")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _banner(host: str, port: int, config: ServerConfig, tokenizer: str) -> str:
    shown_host = f"[{host}]" if ":" in host else host
    lines = [
        f"dsmlkit serve: listening on http://{shown_host}:{port}",
        f"  dialect {config.dialect}, model {config.served_model}",
        f"  tokenizer: {tokenizer}",
        "  always on: GET /health, GET /v1/models, GET /metrics, "
        "POST /v1/chat/completions/render, POST /v1/messages/render, "
        "POST /v1/responses/render, POST /tokenize, "
        "POST /detokenize, POST /v1/messages/count_tokens, POST /v1/parse",
    ]
    if config.upstream_endpoint is None:
        lines.append("  gateway: off (no --upstream)")
    else:
        lines.append(
            f"  gateway: POST /v1/chat/completions, POST /v1/messages, POST /v1/responses -> "
            f"{config.upstream_endpoint} ({config.upstream_api})"
        )
    lines.append(f"  API key: {'required' if config.api_key else 'not required'}")
    if config.api_key is None and not _is_loopback(host):
        lines.append(f"  WARNING: {host} is not loopback and no --api-key is set")
    return "\n".join(lines)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
