"""The arguments JSON of long values: escaped as ``encode_basestring`` does, decoded exactly.

Long ASCII values take a faster escaping path and keep their text instead of decoding the
JSON again; both must give what the short path gives, character for character.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.parse import parse
from dsmlkit.parse.arguments import json_fragment
from tests.helpers import counter_ids, parse_chunks

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None)
# Every ASCII character, with the ones JSON escapes (and DEL) far more often than by chance.
ascii_text = st.text(
    alphabet=st.characters(max_codepoint=0x7F) | st.sampled_from('"\\\n\r\t\b\f\x00\x1f\x7f'),
    max_size=40,
)
# Long texts: a short piece repeated past the fast path's threshold, with an odd ending.
long_text = st.tuples(ascii_text, st.integers(1, 3000), st.text(max_size=3)).map(
    lambda parts: parts[0] * (2000 // max(1, len(parts[0])) + 1) + parts[0][: parts[1]] + parts[2]
)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(ascii_text, long_text))
def test_json_fragment_is_encode_basestring(text: str) -> None:
    assert json_fragment(text) == encode_basestring(text)[1:-1]


@pytest.mark.slow
@SETTINGS
@given(long_text.filter(lambda text: "<" not in text))
def test_long_value_whole_equals_streamed(value: str) -> None:
    output = (
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="write">\n'
        f'<｜DSML｜parameter name="content" string="true">{value}</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    whole = parse(output, id_factory=counter_ids())
    assert [call.arguments for call in whole.calls] == [{"content": value}]
    assert json.loads(whole.calls[0].arguments_json) == {"content": value}
    for size in (7, 1500):  # per-delta fragments, long fragments, and both in one value
        chunks = [output[i : i + size] for i in range(0, len(output), size)]
        assert parse_chunks(chunks, "v4.1").calls == whole.calls
