"""``dsmlkit serve`` as a user starts it: a real process on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import httpx


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_process(
    *flags: str, env: dict[str, str] | None = None, python: str = sys.executable
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running ``dsmlkit serve FLAGS`` (``env`` added to this process's environment; run by
    ``python``) and its URL, once ``/health`` answers; stopped (SIGTERM, then SIGKILL) on
    exit."""
    port = free_port()
    process = subprocess.Popen(
        [python, "-m", "dsmlkit", "serve", "--port", str(port), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "default", **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/health", timeout=1)
            break
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(process.communicate()[1]) from None
            time.sleep(0.1)
    try:
        yield process, url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


class ServerLog:
    """What a ``dsmlkit serve`` process writes to stderr, read by a thread as it comes (a
    pipe nobody reads fills after about 64 KB and then stalls the server's next log line).

    ``lines`` holds every line; ``records()`` the JSON log lines, decoded.
    """

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None, "start the process with stderr=PIPE"
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def records(self, since: int = 0) -> list[dict[str, Any]]:
        """The JSON log lines after the first ``since`` lines."""
        return [json.loads(line) for line in self.lines[since:] if line.startswith("{")]

    def tracebacks(self) -> list[str]:
        """The lines that start a traceback."""
        return [line for line in self.lines if "Traceback" in line]

    def wait_for(self, event: str, since: int = 0, timeout: float = 5.0, **fields: Any) -> None:
        """Wait until a JSON line with this ``event`` (and these ``fields``' values) comes
        after the first ``since`` (the ``GET /health`` that started the process has a
        ``request`` line too, which may come after ``since``)."""
        wanted = {"event": event, **fields}
        deadline = time.monotonic() + timeout
        while not any(
            all(record.get(key) == value for key, value in wanted.items())
            for record in self.records(since)
        ):
            assert time.monotonic() < deadline, f"no {wanted!r} log line in {timeout} s"
            time.sleep(0.01)

    def join(self, timeout: float) -> None:
        """Wait for the end of the stream (the process has ended)."""
        self._thread.join(timeout)
