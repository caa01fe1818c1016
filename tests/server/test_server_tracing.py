"""OpenTelemetry through a real ``dsmlkit serve`` in front of the fake engine, exporting to
an OTLP/HTTP receiver run by the test (its protobuf decoded with ``opentelemetry-proto``);
and a default server that imports none of it."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from tests.server.conftest import CLIENT_TIMEOUT
from tests.server.fake_engine import FakeEngine, Reply
from tests.server.process import serve_process
from tests.server.test_server_process import _stopped

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

trace_service_pb2 = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2", reason="needs dsmlkit[otel]"
)

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
FAILING_ID = "1af7651916cd43dd8448eb211c80319d"
SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind


class _Receiver(http.server.BaseHTTPRequestHandler):
    """Accepts ``POST /v1/traces`` (OTLP/HTTP, protobuf) and keeps the spans."""

    spans: ClassVar[list[Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        assert self.path == "/v1/traces", self.path
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Any]]]:
    spans: list[Any] = []
    handler = type("Receiver", (_Receiver,), {"spans": spans})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_is_traced_to_the_engine(
    engine_server: tuple[FakeEngine, str], receiver: tuple[str, list[Any]]
) -> None:
    engine, engine_url = engine_server
    endpoint, spans = receiver
    engine.headers.clear()
    engine.push(Reply(text="Hello there, how are you?", chunk_size=2), Reply(status=500))
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    flags = ("--tokenizer", "none", "--upstream", engine_url)
    with serve_process(*flags, env=env) as (process, url):
        headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=CHAT, headers=headers, timeout=CLIENT_TIMEOUT
        ) as r:
            assert r.status_code == 200 and list(r.iter_lines())
        failing = {"traceparent": f"00-{FAILING_ID}-{PARENT_ID}-01"}
        response = httpx.post(url + "/v1/chat/completions", json=CHAT, headers=failing)
        assert response.status_code == 502
        code, _, err = _stopped(process, signal.SIGTERM)  # the spans still queued go out
    assert code == 0, err
    ours = {s.name: s for s in spans if s.trace_id.hex() == TRACE_ID}
    server = ours["POST /v1/chat/completions"]
    assert server.parent_span_id.hex() == PARENT_ID and server.kind == SPAN_KIND_SERVER
    stages = {"read", "restore", "plan", "upstream", "fold", "write"}
    assert stages | {server.name} == set(ours)
    for name in stages:
        span = ours[name]
        assert span.parent_span_id == server.span_id, name
        assert server.start_time_unix_nano <= span.start_time_unix_nano
        assert span.start_time_unix_nano <= span.end_time_unix_nano <= server.end_time_unix_nano
    upstream = ours["upstream"]
    assert upstream.kind == SPAN_KIND_CLIENT
    sent = engine.headers[0]["traceparent"]
    assert sent == f"00-{TRACE_ID}-{upstream.span_id.hex()}-01"
    # an upstream that refused: its client span ends too, both in error
    failed = {s.name: s for s in spans if s.trace_id.hex() == FAILING_ID}
    stages = {"read", "restore", "plan", "upstream", "write"}  # write: the error body
    assert stages | {"POST /v1/chat/completions"} == set(failed)
    assert failed["upstream"].status.code == failed["POST /v1/chat/completions"].status.code == 2


def test_a_default_server_imports_no_opentelemetry_sdk() -> None:
    # FastAPI itself imports opentelemetry's API when it is installed; the SDK, the
    # exporter and its protobuf are what tracing would add
    script = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from dsmlkit.server import ServerConfig, create_app\n"
        "with TestClient(create_app(ServerConfig(tokenizer='none'))) as client:\n"
        "    assert client.post('/v1/parse', json={'text': 'hi'}).status_code == 200\n"
        "added = ('opentelemetry.sdk', 'opentelemetry.exporter', 'opentelemetry.proto')\n"
        "print(sorted(m for m in sys.modules if m.startswith(added)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=_environ(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _environ() -> dict[str, str]:
    """This process's environment without any OTLP endpoint."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
