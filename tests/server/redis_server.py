"""A real ``redis-server`` on a free loopback port, for the state-store tests.

``.ci/run`` installs Debian's redis-server and starts one for the whole run (its URL in
``DSMLKIT_TEST_REDIS_URL``); without it the tests start their own. Tests that need a
server they may stop start their own. Only a missing ``redis-server`` skips them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
import redis

from tests.server.process import free_port

URL_ENV = "DSMLKIT_TEST_REDIS_URL"
SKIP_REASON = (
    "redis-server is not on PATH (Debian: apt-get install redis-server; .ci/run installs it)"
)


@contextmanager
def redis_server(port: int | None = None, options: Sequence[str] = ()) -> Iterator[str]:
    """Start a private redis-server (no persistence) on ``port`` (default: a free one), with
    the command-line ``options`` added (``("--maxmemory", "4mb")``), and yield
    ``redis://127.0.0.1:PORT/0``."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(SKIP_REASON)
    port = port or free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        process.wait(5)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The run's Redis: .ci/run's (``DSMLKIT_TEST_REDIS_URL``) or one started here."""
    given = os.environ.get(URL_ENV)
    if given:
        yield given
        return
    with redis_server() as url:
        yield url
