"""Real Redis servers on free loopback ports, for the state-store tests: one server, a
Redis Cluster of three masters and a Sentinel watching a master and its replica.

``.ci/run`` installs Debian's redis-server and redis-sentinel and starts one server for
the whole run (its URL in ``DSMLKIT_TEST_REDIS_URL``); without it the tests start their
own. Tests that need a server they may stop, a Cluster or a Sentinel start their own. Only
a missing ``redis-server``, ``redis-sentinel`` or ``redis-cli`` skips them, and under
``DSMLKIT_REQUIRE_REDIS=1`` (set by ``.ci/run``) that is an error instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import redis

URL_ENV = "DSMLKIT_TEST_REDIS_URL"
REQUIRE_ENV = "DSMLKIT_REQUIRE_REDIS"
#: The service the test Sentinel watches.
SERVICE = "dsmlkit"
#: Options every test server starts with: loopback only, no persistence.
EPHEMERAL = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")


def binary(name: str) -> str:
    """The path of the Redis program ``name``; a skip where it is not installed (an error
    under ``DSMLKIT_REQUIRE_REDIS=1``)."""
    found = shutil.which(name)
    if found is not None:
        return found
    package = "redis-sentinel" if name == "redis-sentinel" else "redis-server"
    reason = f"{name} is not on PATH (Debian: apt-get install {package}; .ci/run installs it)"
    if os.environ.get(REQUIRE_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


def free_ports(count: int) -> list[int]:
    """``count`` different loopback TCP ports nothing listens on now."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


@contextmanager
def _running(command: Sequence[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` (a Redis server or Sentinel listening on ``port``) once it answers PING;
    stopped on exit."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not start") from None
                time.sleep(0.05)
        client.close()
        yield process
    finally:
        process.terminate()
        process.wait(5)


@contextmanager
def redis_server(port: int | None = None, options: Sequence[str] = ()) -> Iterator[str]:
    """Start a private redis-server (no persistence) on ``port`` (default: a free one), with
    the command-line ``options`` added (``("--maxmemory", "4mb")``), and yield
    ``redis://127.0.0.1:PORT/0``."""
    server = binary("redis-server")
    port = port or free_ports(1)[0]
    with _running([server, "--port", str(port), *EPHEMERAL, *options], port):
        yield f"redis://127.0.0.1:{port}/0"


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[str]:
    """A Redis Cluster of ``masters`` masters (no replicas) on loopback ports, its slots
    spread by ``redis-cli --cluster create``; yields
    ``redis+cluster://127.0.0.1:PORT,…`` once every node says the cluster is ok."""
    server, cli = binary("redis-server"), binary("redis-cli")
    ports = free_ports(2 * masters)
    nodes, buses = ports[:masters], ports[masters:]
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        for port, bus in zip(nodes, buses, strict=True):
            cluster = ("--cluster-enabled", "yes", "--cluster-port", str(bus))
            config = ("--cluster-config-file", f"{folder}/nodes-{port}.conf", "--dir", folder)
            stack.enter_context(
                _running([server, "--port", str(port), *EPHEMERAL, *cluster, *config], port)
            )
        addresses = [f"127.0.0.1:{port}" for port in nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in nodes:
            with redis.Redis(port=port) as client:
                _wait_for(partial(_cluster_ok, client))
        yield "redis+cluster://" + ",".join(addresses)


def node_ports(setting: str) -> list[int]:
    """The ports of the Redis nodes a ``redis://`` or ``redis+cluster://`` setting names."""
    hosts = setting.split("//", 1)[1].split("/", 1)[0]
    return [int(node.rsplit(":", 1)[1]) for node in hosts.split(",")]


def client_for(setting: str) -> redis.Redis | redis.RedisCluster:
    """A client of the test's own for a ``redis://`` or ``redis+cluster://`` setting."""
    if setting.startswith("redis+cluster://"):
        return redis.RedisCluster(host="127.0.0.1", port=node_ports(setting)[0])
    return redis.Redis.from_url(setting)


@dataclass(frozen=True)
class SentinelSetup:
    """A master, its replica and a Sentinel watching them (as :data:`SERVICE`)."""

    url: str
    master: int
    replica: int
    sentinel: int
    #: The master's redis-server (kill it to fail over).
    master_process: subprocess.Popen[bytes]


@contextmanager
def redis_sentinel() -> Iterator[SentinelSetup]:
    """A master and its replica, and one Sentinel watching them (quorum 1, a master that
    does not answer for 1 s is down); yields once the Sentinel knows the replica."""
    server, sentinel = binary("redis-server"), binary("redis-sentinel")
    master, replica, watcher = free_ports(3)
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        first = stack.enter_context(_running([server, "--port", str(master), *EPHEMERAL], master))
        follow = ("--replicaof", "127.0.0.1", str(master))
        stack.enter_context(
            _running([server, "--port", str(replica), *EPHEMERAL, *follow], replica)
        )
        config = Path(folder, "sentinel.conf")  # a Sentinel rewrites its file: one per test
        config.write_text(
            f"port {watcher}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
        )
        stack.enter_context(_running([sentinel, str(config)], watcher))
        with redis.Redis(port=replica) as client:
            _wait_for(partial(_synced, client))
        with redis.Redis(port=watcher) as client:
            _wait_for(partial(_known, client))
        url = f"redis+sentinel://127.0.0.1:{watcher}/{SERVICE}/0"
        yield SentinelSetup(url, master, replica, watcher, first)


def _cluster_ok(node: redis.Redis) -> bool:
    return bool(node.cluster("info")["cluster_state"] == "ok")


def _synced(replica: redis.Redis) -> bool:
    return bool(replica.info("replication")["master_link_status"] == "up")


def _known(sentinel: redis.Redis) -> bool:
    """Whether the Sentinel knows the master's replica (it can fail over to it)."""
    return bool(sentinel.sentinel_slaves(SERVICE))


def _wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    """Poll ``condition`` until it is true; an error after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the Redis servers did not get ready")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The run's Redis: .ci/run's (``DSMLKIT_TEST_REDIS_URL``) or one started here."""
    given = os.environ.get(URL_ENV)
    if given:
        yield given
        return
    with redis_server() as url:
        yield url
