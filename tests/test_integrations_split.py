"""ReasoningSplit + a content parser over the rest == one dsmlkit parser over the output."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.errors import CallerError
from dsmlkit.integrations.split import ReasoningSplit
from dsmlkit.parse import MessageCollector
from tests.helpers import counter_ids, parse_chunks, random_chunks, summary

VECTORS = json.loads((Path(__file__).parent / "data" / "parse.json").read_text("utf-8"))["vectors"]
THINKING = [v for v in VECTORS if v["mode"] == "thinking"]


def _split_parse(chunks: list[str], dialect: str) -> dict[str, Any]:
    from dsmlkit.parse import Parser

    split = ReasoningSplit(dialect)
    reasoning: list[str] = []
    rest: Parser | None = None
    collector = MessageCollector()
    for chunk in chunks:
        if rest is not None:
            collector.add(rest.feed(chunk))
            continue
        step = split.feed(chunk)
        reasoning.append(step.reasoning)
        if step.after is not None:
            rest = Parser(dialect, id_factory=counter_ids())
            collector.add(rest.feed(step.after))
    if rest is None:
        step = split.close()
        reasoning.append(step.reasoning)
        rest = Parser(dialect, id_factory=counter_ids())
        collector.add(rest.feed(step.after or ""))
    collector.add(rest.close())
    got = summary(collector.message())
    got["reasoning"] = "".join(reasoning)
    return got


@pytest.mark.parametrize("vector", THINKING, ids=[v["id"] for v in THINKING])
def test_split_matches_one_parser(vector: dict[str, Any]) -> None:
    text, dialect = vector["text"], vector["version"]
    want = summary(parse_chunks([text], dialect, start_in="reasoning"))
    assert _split_parse([text], dialect) == want
    assert _split_parse(list(text), dialect) == want
    rng = random.Random(vector["id"])
    for _ in range(10):
        assert _split_parse(random_chunks(text, rng), dialect) == want


def test_split_hands_over_once_then_refuses_more() -> None:
    split = ReasoningSplit("v4.1")
    step = split.feed("plan</thi")
    assert (step.reasoning, step.after) == ("plan", None)
    step = split.feed("nk>Answer <b>")
    assert (step.reasoning, step.after) == ("", "Answer <b>")
    with pytest.raises(CallerError, match="tool parser"):
        split.feed("more")
