"""Image sizes read from encoded headers, and the prompt tokens V4.1 spends on an image."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsmlkit.conversation import build_conversation
from dsmlkit.dialects import V41_VISION, Vision
from dsmlkit.errors import InvalidRequest
from dsmlkit.render.images import (
    ImageHeader,
    ImageSize,
    UnreadableImage,
    count_images,
    data_url_bytes,
    image_tokens,
)
from tests.images import data_url, png

IMAGES = Path(__file__).parent / "data" / "images"

#: (width, height) -> tokens, as vLLM 0.34's DeepSeek-V4.1 image processor
#: (``vllm/models/deepseek_v41/common/mm_preprocess.py``, ``DeepseekV4VLImageProcessor`` with
#: the config's defaults) computes them: each figure was taken from vLLM running on an image
#: of that size, and tests/engines/test_vllm_images.py checks this same table against vLLM.
V41_TOKENS = {
    (16, 16): 184,  # tiny: scaled up to min_pixels
    (1, 1): 184,
    (543, 545): 184,
    (800, 600): 317,
    (1024, 1024): 652,  # square
    (1344, 1344): 994,
    (1345, 1343): 994,
    (1920, 1080): 968,
    (1080, 1920): 986,
    (3000, 200): 367,  # wide
    (200, 3000): 434,  # tall
    (4000, 10): 263,
    (10, 4000): 522,
    (8000, 8000): 994,  # over the maximum: shrunk to fit 1024
    (10000, 3): 751,
    (3, 10000): 1024,  # one column of the budget's length
    (100000, 1): 1024,  # one row of the budget's length
}

#: A checkpoint with ``max_wh_ratio`` 2.5 and ``max_image_tokens`` 256 (vision_config
#: settings), likewise taken from vLLM 0.34.
NARROWED = Vision(max_wh_ratio=2.5, max_tokens=256)
NARROWED_TOKENS = {
    (3000, 200): 200,
    (1000, 400): 252,
    (999, 400): 252,
    (200, 3000): 182,
    (16, 16): 184,
    (5000, 1000): 218,
}


@pytest.mark.parametrize(("size", "tokens"), V41_TOKENS.items(), ids=str)
def test_v41_image_tokens_equal_vllms(size: tuple[int, int], tokens: int) -> None:
    assert image_tokens(ImageSize(*size), V41_VISION) == tokens


@pytest.mark.parametrize(("size", "tokens"), NARROWED_TOKENS.items(), ids=str)
def test_a_width_ratio_and_a_smaller_budget_count_as_vllms(
    size: tuple[int, int], tokens: int
) -> None:
    assert image_tokens(ImageSize(*size), NARROWED) == tokens


def test_no_image_costs_more_than_the_budget() -> None:
    for width in (1, 7, 14, 42, 43, 500, 1343, 4096, 65535):
        for height in (1, 3, 41, 42, 999, 2048, 65535):
            assert 4 <= image_tokens(ImageSize(width, height), V41_VISION) <= 1024


@pytest.mark.parametrize("name", sorted(json.loads((IMAGES / "sizes.json").read_text())))
def test_the_header_gives_the_size_pillow_shows(name: str) -> None:
    shown = json.loads((IMAGES / "sizes.json").read_text())[name]
    assert ImageHeader((IMAGES / name).read_bytes()).size() == ImageSize(*shown)


@pytest.mark.parametrize("size", [(1, 1), (16, 16), (1024, 1024), (3000, 200), (70000, 2)])
def test_png_sizes(size: tuple[int, int]) -> None:
    assert ImageHeader(png(*size)).size() == ImageSize(*size)


def test_a_png_exif_orientation_after_the_pixels_still_turns_it() -> None:
    exif = b"MM\x00*\x00\x00\x00\x08\x00\x01" + struct.pack(">HHIHH", 0x0112, 3, 1, 8, 0)
    data = png(40, 30)
    end = data.rindex(b"\x00\x00\x00\x00IEND")
    late = struct.pack(">I", len(exif)) + b"eXIf" + exif + b"\x00\x00\x00\x00"
    assert ImageHeader(data[:end] + late + data[end:]).size() == ImageSize(30, 40)


def test_a_gif_whose_first_frame_reaches_past_its_screen_is_that_much_larger() -> None:
    screen = b"GIF89a" + struct.pack("<HHBBB", 40, 30, 0, 0, 0)
    comment = b"!\xfe\x03abc\x00"
    frame = b"," + struct.pack("<HHHHB", 10, 5, 50, 20, 0) + b"\x02\x02\x44\x01\x00;"
    assert ImageHeader(screen + comment + frame).size() == ImageSize(60, 30)


def test_a_gif_with_a_colour_table_reads_past_it() -> None:
    screen = b"GIF87a" + struct.pack("<HHBBB", 8, 9, 0x81, 0, 0) + b"\x00" * 12
    frame = b"," + struct.pack("<HHHHB", 0, 0, 8, 9, 0) + b"\x02\x02\x44\x01\x00;"
    assert ImageHeader(screen + frame).size() == ImageSize(8, 9)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"BM\x00\x00", "not a PNG, JPEG, WebP or GIF image"),
        (b"", "not a PNG, JPEG, WebP or GIF image"),
        (png(4, 4)[:20], "ends inside its header"),
        (png(0, 4), "size of 0x4"),
        (b"\xff\xd8\xff\xe0\x00\x04ab\xff\xda\x00\x02", "no frame header"),
        (b"\xff\xd8\xff\xc0\x00\x11\x08", "ends inside its header"),
        (b"\xff\xd8junk", "JPEG marker was expected"),
        (b"\xff\xd8\xff\xe0\x00\x01", "a length of 1"),
        (b"\xff\xd8\xff\xc0\x00\x04ab\xff\xda", "frame header is too short"),
        (b"RIFF\x0c\x00\x00\x00WEBPJUNK\x00\x00\x00\x00", "no VP8, VP8L or VP8X"),
        (b"RIFF\x0c\x00\x00\x00WEBPVP8L\x05\x00\x00\x00\x00abcd", "no signature"),
        (b"GIF89a\x01", "ends inside its header"),
    ],
)
def test_what_is_not_a_readable_image_says_why(data: bytes, says: str) -> None:
    with pytest.raises(UnreadableImage, match=says):
        ImageHeader(data).size()


SIGNATURES = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8", b"RIFF\x00\x00\x00\x00WEBP", b"GIF89a", b""]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SIGNATURES), st.binary(max_size=200))
def test_any_bytes_give_a_size_or_say_why(signature: bytes, rest: bytes) -> None:
    try:
        size = ImageHeader(signature + rest).size()
    except UnreadableImage:
        return
    assert size.width >= 1 and size.height >= 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 90), st.binary(min_size=1, max_size=8))
def test_a_damaged_fixture_gives_a_size_or_says_why(cut: int, junk: bytes) -> None:
    for name in ("exif6.jpg", "xmp6.webp", "exif6.png", "plain.gif"):
        data = (IMAGES / name).read_bytes()
        try:
            ImageHeader(data[:cut] + junk + data[cut + len(junk) :]).size()
            ImageHeader(data[:cut]).size()
        except UnreadableImage:
            pass


def test_data_urls_base64_and_percent_encoded() -> None:
    assert data_url_bytes("data:image/png;base64,iVBORw0=") == b"\x89PNG\r"
    assert data_url_bytes("DATA:image/gif,GIF89a%01%02") == b"GIF89a\x01\x02"
    assert data_url_bytes("https://example.com/cat.png") is None
    with pytest.raises(UnreadableImage, match="not valid base64"):
        data_url_bytes("data:image/png;base64,iV BO")
    with pytest.raises(UnreadableImage, match="comma"):
        data_url_bytes("data:image/png;base64")


def _conversation(*urls: str) -> list[dict[str, object]]:
    parts: list[dict[str, object]] = [{"type": "text", "text": "What is this?"}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": parts}]


def test_a_conversations_images_add_their_spans_less_their_placeholders() -> None:
    messages = _conversation(data_url(png(16, 16)), data_url(png(1024, 1024)))
    count = count_images(build_conversation(messages), V41_VISION)
    assert (count.images, count.tokens, count.uncounted) == (2, 184 + 652, ())
    assert count.extra == 184 + 652 - 2


def test_an_image_given_by_url_is_not_counted_and_named() -> None:
    messages = _conversation("https://example.com/cat.png", data_url(png(16, 16)))
    count = count_images(build_conversation(messages), V41_VISION)
    assert (count.images, count.tokens) == (2, 184)
    assert count.uncounted == ("messages[0].content[1]",)
    assert count.extra == 184 - 1  # the unknown image: its placeholder alone


def test_an_unreadable_image_is_a_400_naming_its_part() -> None:
    messages = _conversation(data_url(png(16, 16)), data_url(b"not an image"))
    with pytest.raises(InvalidRequest) as caught:
        count_images(build_conversation(messages), V41_VISION)
    assert caught.value.param == "messages[0].content[2]"
    assert "PNG, JPEG, WebP or GIF" in caught.value.message
