"""The state stores (memory, SQLite, a real Redis) and the reasoning memory on top of them."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsmlkit.api import ReadContext, SealError, api_named
from dsmlkit.dialects import DEFAULT_DIALECT
from dsmlkit.parse import ReasoningDelta, ToolCallEnd
from dsmlkit.server.fold import AnswerTracker
from dsmlkit.server.model_turns import ModelCall
from dsmlkit.server.reasoning_store import (
    Digests,
    Found,
    ReasoningMemory,
    ThinkingSigner,
    Written,
)
from dsmlkit.server.restore import Restored, restore
from dsmlkit.server.sealing import KeyRing
from dsmlkit.server.state_store import (
    MemoryStore,
    RedisStore,
    SqliteStore,
    StateStore,
    StateStoreUnavailable,
    entry_size,
    get_one,
    open_store,
)
from tests.server.process import free_port
from tests.server.redis_server import redis_url

__all__ = ["redis_url"]  # the fixture


StoreTest = Callable[[StateStore], Awaitable[None]]


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def with_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[StoreTest], None]:
    """``with_store(test)`` runs ``await test(store)`` on a fresh store of each kind, in one
    event loop (the Redis client belongs to the loop it connected in)."""

    def make() -> StateStore:
        if request.param == "memory":
            return MemoryStore()
        if request.param == "sqlite":
            return SqliteStore(str(tmp_path / "state.db"))
        return RedisStore(request.getfixturevalue("redis_url"))

    def run_test(test: StoreTest) -> None:
        async def go() -> None:
            store = make()
            try:
                if isinstance(store, RedisStore):
                    await store._client.flushdb()
                await test(store)
            finally:
                await store.aclose()

        anyio.run(go)

    return run_test


def run(work: Any, *args: Any) -> Any:
    return anyio.run(work, *args)


def test_values_come_back_and_missing_keys_are_left_out(with_store: Any) -> None:
    async def test(store: StateStore) -> None:
        await store.put_many({"a": "1", "b": "ü ｜DSML｜ \n"})
        assert await store.get_many(["a", "b", "c"]) == {"a": "1", "b": "ü ｜DSML｜ \n"}
        assert await store.get_many([]) == {}
        assert await get_one(store, "a") == "1"

    with_store(test)


def test_entries_expire(with_store: Any) -> None:
    async def test(store: StateStore) -> None:
        await store.put_many({"short": "x"}, 0.05)
        await store.put_many({"long": "y"}, 60.0)
        await anyio.sleep(0.15)
        assert await store.get_many(["short", "long"]) == {"long": "y"}

    with_store(test)


def test_a_live_store_is_ready(with_store: Any) -> None:
    async def test(store: StateStore) -> None:
        health = await store.check()
        assert health.ok and health.error is None

    with_store(test)


def test_memory_store_drops_the_least_recently_used() -> None:
    store = MemoryStore(max_bytes=2 * entry_size("a", "1"))
    run(store.put_many, {"a": "1", "b": "2"})
    run(store.get_many, ["a"])  # a is now the most recent
    run(store.put_many, {"c": "3"})
    assert run(store.get_many, ["a", "b", "c"]) == {"a": "1", "c": "3"}
    assert len(store) == 2


def test_memory_store_counts_bytes_and_drops_the_least_recently_used_first() -> None:
    value = "x" * 1000
    one = entry_size("k0", value)
    store = MemoryStore(max_bytes=3 * one)
    run(store.put_many, {"k0": value, "k1": value, "k2": value})
    assert (len(store), store.size) == (3, 3 * one)
    run(store.get_many, ["k0"])  # k0 is now the most recently used, k1 the least
    run(store.put_many, {"k3": value})
    assert run(store.get_many, ["k0", "k1", "k2", "k3"]).keys() == {"k0", "k2", "k3"}
    run(store.put_many, {"k2": "y"})  # a smaller value replaces the old one's bytes
    assert store.size == 2 * one + entry_size("k2", "y")
    wide = "€" * 1000  # Python holds it in two bytes a character
    assert entry_size("k4", wide) > entry_size("k4", value)
    run(store.put_many, {"k4": wide})  # the least recent go: k0 (read before k3), then k3
    assert run(store.get_many, ["k0", "k2", "k3", "k4"]).keys() == {"k2", "k4"}
    assert store.size == entry_size("k2", "y") + entry_size("k4", wide) <= store.max_bytes


def test_memory_store_keeps_no_value_larger_than_its_bound() -> None:
    store = MemoryStore(max_bytes=entry_size("k", "x" * 100))
    run(store.put_many, {"k": "x" * 100})
    run(store.put_many, {"big": "x" * 101})
    assert run(store.get_many, ["k", "big"]) == {"k": "x" * 100}  # nothing else pushed out


def test_memory_store_frees_the_bytes_of_expired_entries() -> None:
    store = MemoryStore()
    run(store.put_many, {"gone": "x" * 100}, 0.01)
    run(store.put_many, {"kept": "y"})
    time.sleep(0.05)
    assert run(store.get_many, ["gone", "kept"]) == {"kept": "y"}
    assert store.size == entry_size("kept", "y")


def test_sqlite_store_keeps_values_across_instances(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first = SqliteStore(path)
    run(first.put_many, {"k": "v"})
    run(first.aclose)
    second = SqliteStore(path)
    assert run(second.get_many, ["k"]) == {"k": "v"}
    run(second.aclose)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("memcached://x", "must be memory, sqlite:PATH, redis://HOST:PORT/DB, redis"),
        ("sqlite:", "needs a file path"),
        ("sqlite:/nonexistent-dir/x/state.db", "cannot open the file"),
        ("redis://host:notaport/0", "redis://"),
    ],
)
def test_bad_state_settings_say_what_to_write(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(setting)


def test_redis_store_that_is_down_fails_fast_and_reports_it() -> None:
    async def test() -> None:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
        with pytest.raises(StateStoreUnavailable, match=r"127\.0\.0\.1"):
            await store.get_many(["k"])
        started = time.monotonic()
        with pytest.raises(StateStoreUnavailable, match="backing off"):
            await store.put_many({"k": "v"})
        assert time.monotonic() - started < 0.1
        health = await store.check()
        assert not health.ok and health.error
        assert health.as_json()["backend"] == store.description
        await store.aclose()

    anyio.run(test)


@pytest.mark.slow
def test_redis_url_password_is_not_shown(redis_url: str) -> None:
    store = RedisStore(redis_url.replace("redis://", "redis://:hunter2@"))
    assert "hunter2" not in store.description
    run(store.aclose)


# --- the reasoning memory, without HTTP ---------------------------------------------------


CALL_1, CALL_2 = "call_" + "1" * 24, "call_" + "2" * 24
TOOLU_1 = "toolu_" + "1" * 24


def memory() -> ReasoningMemory:
    return ReasoningMemory(MemoryStore(), ThinkingSigner())


def answer(call_ids: list[str], reasoning: str) -> AnswerTracker:
    """An answer with that reasoning and one call ``f({})`` per id."""
    tracker = AnswerTracker()
    tracker.add([ReasoningDelta(reasoning)] if reasoning else [])
    tracker.add(ToolCallEnd(n, i, "f", {}, "{}") for n, i in enumerate(call_ids))
    return tracker


def anthropic_body(thinking: dict[str, Any] | None, call_id: str = TOOLU_1) -> dict[str, Any]:
    blocks = [thinking] if thinking else []
    blocks.append({"type": "tool_use", "id": call_id, "name": "f", "input": {}})
    return {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": blocks}]
    }


def _verifies(signer: ThinkingSigner, thinking: str, signature: str, model: str) -> bool:
    try:
        return signer.open(signature, model) == thinking
    except SealError:
        return False


def test_signatures_bind_the_text_the_model_and_the_key_ring() -> None:
    signer = ThinkingSigner(KeyRing([b"s" * 32]))
    signature = signer.sign("thought", "m")
    assert signature.startswith("dsmlkit-t2.") and signature != signer.sign("thought", "m")
    assert _verifies(signer, "thought", signature, "m")
    assert not _verifies(signer, "thought.", signature, "m")
    assert not _verifies(signer, "thought", signature, "other-model")
    assert not _verifies(ThinkingSigner(KeyRing([b"o" * 32])), "thought", signature, "m")
    assert _verifies(ThinkingSigner(KeyRing([b"o" * 32, b"s" * 32])), "thought", signature, "m")
    reasoning_token = signer.ring.seal("thought", "m")  # a Responses token is no signature
    assert not _verifies(signer, "thought", reasoning_token, "m")
    assert not _verifies(signer, "thought", "ünïcode", "m")  # never raises on client input


def _restored(mem: ReasoningMemory, api: str, body: dict[str, Any]) -> Restored:
    """``body`` read as the gateway reads it (signatures checked), then restored."""
    context = ReadContext(DEFAULT_DIALECT, signatures=mem.signer)
    restored: Restored = run(restore, mem, api_named(api).read({"model": "m", **body}, context))
    return restored


def test_restore_never_changes_the_request_read() -> None:
    mem = memory()
    run(mem.remember, answer([CALL_1], "why").calls(), Digests(()))
    call = {"id": CALL_1, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
    }
    read = api_named("openai").read({"model": "m", **body}, ReadContext(DEFAULT_DIALECT))
    restored = run(restore, mem, read)
    assert (restored.reasoning, restored.error, restored.put_back) == (1, None, True)
    assert restored.req.conversation.messages[1].reasoning == "why"
    assert read.conversation.messages[1].reasoning is None


def test_restore_without_known_calls_gives_the_request_as_read() -> None:
    read = api_named("anthropic").read(
        {"model": "m", "max_tokens": 5, **anthropic_body(None)}, ReadContext(DEFAULT_DIALECT)
    )
    restored = run(restore, memory(), read)
    assert (restored.req, restored.reasoning, restored.error, restored.put_back) == (
        read,
        0,
        None,
        False,
    )


_SIGNER = ThinkingSigner()


@pytest.mark.parametrize(
    ("thinking", "reasoning"),
    [
        # signed by the gateway: used as sent, no store needed
        ({"type": "thinking", "thinking": "mine", "signature": _SIGNER.sign("mine", "m")}, "mine"),
        # a redacted block, or a signature of another text: the stored reasoning instead
        ({"type": "redacted_thinking", "data": "opaque"}, "stored"),
        (
            {"type": "thinking", "thinking": "mine", "signature": _SIGNER.sign("other", "m")},
            "stored",
        ),
    ],
    ids=["signed", "redacted", "forged"],
)
def test_anthropic_thinking_is_kept_only_when_signed(thinking: Any, reasoning: str) -> None:
    mem = ReasoningMemory(MemoryStore(), _SIGNER)
    run(mem.remember, answer([TOOLU_1], "stored").calls(), Digests(()))
    restored = _restored(mem, "anthropic", {"max_tokens": 5, **anthropic_body(thinking)})
    assert restored.reasoning == (reasoning == "stored")
    turn = restored.req.conversation.messages[1]
    assert (turn.reasoning, turn.reasoning_trusted) == (reasoning, True)
    assert [call.id for call in turn.tool_calls] == [TOOLU_1]


def test_remember_with_a_dead_store_returns_the_error_and_notes_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mem = ReasoningMemory(RedisStore(f"redis://127.0.0.1:{free_port()}/0"), ThinkingSigner())

    async def twice() -> list[Written]:
        return [
            await mem.remember(answer([CALL_1], "why").calls(), Digests(())),
            await mem.remember(answer([CALL_2], "why").calls(), Digests(())),
        ]

    with caplog.at_level("WARNING", logger="dsmlkit.server"):
        written = anyio.run(twice)
    assert all(w.error for w in written)
    notes = [note.message for w in written for note in w.notes]
    assert len(notes) == 1 and "state_store_unavailable" in notes[0]
    assert not caplog.records  # the request's observer writes the line, not the store


def test_calls_gives_what_the_model_wrote_for_known_call_ids() -> None:
    mem = memory()
    one, two, three, unknown = (f"call_{n:024d}" for n in range(4))
    none = Digests(())

    async def test() -> None:
        await mem.remember(answer([one, two], "both").calls(), none)
        await mem.remember(answer([three], "").calls(), none)  # no reasoning to give back
        keys = {i: key for i in (two, three, unknown) if (key := none.key(i)) is not None}
        read = await mem.read(list(keys.values()), ModelCall.loads)
        found = {i: read.values[key] for i, key in keys.items() if key in read.values}
        assert read.error is None and sorted(found) == [two, three]
        assert (found[two].reasoning, found[three].reasoning) == ("both", "")
        # numbered ids repeat across conversations: keyed with the conversation before them
        conversation = Digests(
            api_named("openai")
            .read(
                {"model": "m", "messages": [{"role": "user", "content": "q"}]},
                ReadContext(DEFAULT_DIALECT),
            )
            .conversation.messages
        )
        await mem.remember(answer(["call_0"], "numbered").calls(), conversation)
        key, elsewhere = conversation.key("call_0"), none.key("call_0")
        assert key is not None and elsewhere is not None and key != elsewhere
        assert (await mem.read([key], ModelCall.loads)).values[key].reasoning == "numbered"
        assert await mem.read([elsewhere], ModelCall.loads) == Found({})  # another conversation's

    anyio.run(test)
