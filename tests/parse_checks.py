"""Checks every parser output must pass: the event-order rules of ``parse/events.py``, chunk
invariance of the whole event stream, strict arguments JSON and no lost characters.

Used by the invariant tests, the fuzz harness and the regression vectors
(``tests/data/parse_regressions.json``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from dsmlkit.parse import (
    ArgumentsDelta,
    ContentDelta,
    Diagnostic,
    Event,
    OutputEnd,
    Parser,
    ReasoningDelta,
    ReasoningEnd,
    ToolCallEnd,
    ToolCallStart,
)
from tests.helpers import counter_ids

#: Characters no DSML tag, attribute keyword or special token contains. Generated outputs
#: put them only in prose and values, so every one must come out somewhere.
PAYLOAD = frozenset("qwxyzQWXYZ杭州é")


def events_of(
    chunks: Sequence[str], dialect: str, finish_reason: str | None = None, **options: Any
) -> list[Event]:
    parser = Parser(dialect, id_factory=counter_ids(), **options)
    events: list[Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close(finish_reason))
    return events


def normalized(events: Sequence[Event]) -> list[Event]:
    """The stream with adjacent text deltas of one kind (and one call) joined."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + event.text)
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + event.text)
        elif (
            isinstance(event, ArgumentsDelta)
            and isinstance(last, ArgumentsDelta)
            and last.index == event.index
        ):
            out[-1] = ArgumentsDelta(event.index, last.text + event.text)
        else:
            out.append(event)
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def check_event_order(events: Sequence[Event]) -> None:
    """The rules in ``parse/events.py``, on one output's events."""
    assert events and isinstance(events[-1], OutputEnd), "OutputEnd comes last"
    assert sum(isinstance(e, OutputEnd) for e in events) == 1, "OutputEnd comes once"
    reasoning_ended = False
    open_call: int | None = None
    started = 0
    fragments: dict[int, list[str]] = {}
    ended: set[int] = set()
    for event in events:
        if isinstance(event, ContentDelta | ReasoningDelta | ArgumentsDelta):
            assert event.text, f"no empty deltas: {event!r}"
        if isinstance(event, ReasoningDelta):
            assert not reasoning_ended, "no reasoning after ReasoningEnd"
        elif isinstance(event, ReasoningEnd):
            assert not reasoning_ended, "ReasoningEnd comes at most once"
            reasoning_ended = True
        elif isinstance(event, ToolCallStart):
            assert event.index == started, "calls are numbered 0, 1, 2... in order"
            assert open_call is None or open_call in ended, "calls never interleave"
            open_call = event.index
            started += 1
            fragments[event.index] = []
        elif isinstance(event, ArgumentsDelta):
            assert event.index == open_call and event.index not in ended, event
            fragments[event.index].append(event.text)
        elif isinstance(event, ToolCallEnd):
            assert event.index == open_call and event.index not in ended, event
            ended.add(event.index)
            assert "".join(fragments[event.index]) == event.arguments_json
            decoded = json.loads(event.arguments_json, parse_constant=_reject_constant)
            assert decoded == event.arguments
            assert isinstance(event.arguments, dict)
            assert len(json.loads(event.arguments_json, object_pairs_hook=list)) == len(
                event.arguments
            ), "every key once"
            event.arguments_json.encode("utf-8")  # no lone surrogates
    finish = events[-1]
    assert isinstance(finish, OutputEnd)
    truncated = [e for e in events if isinstance(e, Diagnostic) and e.kind == "truncated_call"]
    if started > len(ended):
        assert started == len(ended) + 1 and open_call not in ended
        assert truncated and finish.finish_reason == "length"
    else:
        assert not truncated
        if ended:
            assert finish.finish_reason == "tool_calls"


def payload_in(text: str) -> int:
    return sum(char in PAYLOAD for char in text)


def payload_out(events: Sequence[Event]) -> int:
    """Payload characters in content, reasoning, diagnostics, call names and completed
    calls' arguments."""
    total = 0
    for event in events:
        if isinstance(event, ContentDelta | ReasoningDelta | Diagnostic):
            total += payload_in(event.text)
        elif isinstance(event, ToolCallStart):
            total += payload_in(event.name)
        elif isinstance(event, ToolCallEnd):
            total += payload_in(event.arguments_json)
    return total


def check_output(
    text: str,
    chunkings: Sequence[Sequence[str]],
    dialect: str,
    finish_reason: str | None = None,
    **options: Any,
) -> list[Event]:
    """Every check on one output: returns its (whole) events."""
    whole = events_of([text], dialect, finish_reason, **options)
    check_event_order(whole)
    assert payload_out(whole) == payload_in(text), "no character is lost"
    expected = normalized(whole)
    for chunks in chunkings:
        assert "".join(chunks) == text
        streamed = events_of(chunks, dialect, finish_reason, **options)
        check_event_order(streamed)
        assert normalized(streamed) == expected, [len(c) for c in chunks]
    return whole


def split_at(text: str, points: Sequence[int]) -> list[str]:
    cuts = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]
