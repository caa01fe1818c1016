"""``/v1/parse`` does bounded work per request (issue 26, item 1).

A ``chunk_size`` splits the text into deltas whose events the answer lists, about 600
bytes of memory each: 1.6 MB of text at ``chunk_size`` 1 once took 90 MB of answer and
+840 MB of memory. ``--parse-max-deltas`` caps the deltas; past it the answer is a 400
naming the ``chunk_size`` that fits.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.server.process import serve_process

# Real processes (dsmlkit serve).
pytestmark = pytest.mark.slow

#: 1.6 MB of prose, as in the issue's report.
PROSE = ("Some prose about the weather, with <b>tags</b> & quotes.\n" * 30_000)[:1_600_000]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))  # the peak
    return int(line.split()[1]) / 1024


def test_a_chunk_size_that_splits_into_too_many_deltas_is_a_400_before_any_work() -> None:
    with (
        serve_process("--tokenizer", "none") as (process, url),
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert http.post("/v1/parse", json={"text": "warm up"}).status_code == 200
        before = _rss_mb(process.pid)
        answer = http.post("/v1/parse", json={"text": PROSE, "chunk_size": 1})
        after = _rss_mb(process.pid)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "chunk_size")
    assert "at most 20000 (--parse-max-deltas): use a chunk_size of 80 or more" in error["message"]
    assert after - before < 50  # the body, decoded: once +840 MB


def test_the_suggested_chunk_size_is_answered_and_one_less_is_not() -> None:
    text = "It is sunny in Paris today." * 10  # 270 characters
    with (
        serve_process("--tokenizer", "none", env={"DSMLKIT_PARSE_MAX_DELTAS": "50"}) as (
            _,
            url,
        ),
        httpx.Client(base_url=url, timeout=10) as http,
    ):
        refused = http.post("/v1/parse", json={"text": text, "chunk_size": 1}).json()
        fits = int(re.findall(r"use a chunk_size of (\d+) or more", refused["error"]["message"])[0])
        assert fits == 6  # 270 / 6 = 45 deltas; 270 / 5 = 54
        answer = http.post("/v1/parse", json={"text": text, "chunk_size": fits})
        assert answer.status_code == 200
        assert len(answer.json()["stream"]) == 45 + 1  # and close()'s events
        assert answer.json()["choices"][0]["message"]["content"] == text
        smaller = http.post("/v1/parse", json={"text": text, "chunk_size": fits - 1})
        assert smaller.status_code == 400
        assert http.post("/v1/parse", json={"text": text}).status_code == 200
