"""Images in a conversation: their size, read from the encoded bytes' header, and the prompt
tokens a vision checkpoint spends on each.

Standard library only: no image is decoded. :class:`ImageHeader` reads the width and
height of a PNG (``IHDR``), JPEG (the ``SOF`` marker), WebP (``VP8``, ``VP8L`` or ``VP8X``)
or GIF (the logical screen, widened by the first frame where it reaches past it) and turns
them as the engine does before it counts: vLLM opens images with Pillow and applies the
EXIF orientation (``ImageOps.exif_transpose``), so an orientation of 5 to 8 (a quarter
turn) swaps width and height. The orientation is read from EXIF (JPEG ``APP1``, PNG
``eXIf``, WebP ``EXIF``) and, where EXIF has none, from XMP's ``tiff:Orientation``, as
Pillow does; PNG's ``Raw profile type exif`` text is not read.

:func:`image_tokens` counts by the rules of DeepSeek-V4.1's image processor (the figures
in :class:`~dsmlkit.dialects.Vision`; the steps as vLLM 0.34 takes them in
``vllm/models/deepseek_v41/common/mm_preprocess.py``): the size is scaled up to at least
``min_pixels``, rounded up to whole patches, and ``downsample_ratio`` patches a side make
one token; a row of ``w`` tokens costs ``w + 1`` (a row end) and the span two more (its
start and end). A grid past ``max_tokens`` is shrunk, aspect kept, to the largest that
fits. Each image's placeholder token in the prompt becomes that many tokens.

Only images whose bytes the request holds (``data:`` URLs, base64 sources) can be counted;
an ``http(s)`` URL's image is fetched by the engine, and its size is unknown here.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from dsmlkit.conversation.model import Conversation, ImagePart
from dsmlkit.dialects import Vision
from dsmlkit.errors import CallerError, InvalidRequest

#: The formats :class:`ImageHeader` reads, as error messages name them.
FORMATS = "PNG, JPEG, WebP or GIF"

_PNG = b"\x89PNG\r\n\x1a\n"
_EXIF = b"Exif\x00\x00"
_XMP_JPEG = b"http://ns.adobe.com/xap/1.0/\x00"
_XMP_PNG = b"XML:com.adobe.xmp"
#: Pillow's reading of an orientation in XMP.
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')
#: EXIF's orientation tag.
_ORIENTATION_TAG = 0x0112
#: Orientations that turn the image a quarter (Pillow: TRANSPOSE, ROTATE_270, TRANSVERSE,
#: ROTATE_90): width and height swap.
_QUARTER_TURNS = (5, 6, 7, 8)
#: JPEG start-of-frame markers: C0-CF except DHT (C4), JPG (C8) and DAC (CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers that stand alone (no length): TEM, RST0-7, SOI.
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD9)))
#: The most XMP text of a compressed PNG ``iTXt`` chunk that is inflated.
_XMP_LIMIT = 1 << 20


class UnreadableImage(CallerError):
    """The bytes are not an image whose size :class:`ImageHeader` can read."""


@dataclass(frozen=True)
class ImageSize:
    """An image's width and height in pixels, as the engine's image processor sees it."""

    width: int
    height: int


class ImageHeader:
    """Reads one encoded image's size (:meth:`size`) from its header."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._exif: bytes | None = None
        self._xmp: bytes | None = None

    def size(self) -> ImageSize:
        """The displayed size: the stored one, turned by its orientation."""
        data = self.data
        if data.startswith(_PNG):
            width, height = self._png()
        elif data.startswith(b"\xff\xd8"):
            width, height = self._jpeg()
        elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            width, height = self._webp()
        elif data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = self._gif()
        else:
            raise UnreadableImage(f"not a {FORMATS} image")
        if width < 1 or height < 1:
            raise UnreadableImage(f"the image header gives a size of {width}x{height}")
        if self.orientation() in _QUARTER_TURNS:
            return ImageSize(height, width)
        return ImageSize(width, height)

    def orientation(self) -> int:
        """The EXIF orientation (1: as stored), else XMP's, else 1."""
        if self._exif is not None:
            found = _tiff_orientation(self._exif)
            if found is not None:
                return found
        if self._xmp is not None:
            match = _XMP_ORIENTATION.search(self._xmp)
            if match is not None:
                return int(match[2])
        return 1

    def _cut(self, start: int, length: int) -> bytes:
        """``length`` bytes at ``start``; the image is cut short when they are not there."""
        piece = self.data[start : start + length]
        if len(piece) < length:
            raise UnreadableImage("the image data ends inside its header")
        return piece

    def _png(self) -> tuple[int, int]:
        length, kind = struct.unpack(">I4s", self._cut(8, 8))
        if kind != b"IHDR" or length < 8:
            raise UnreadableImage("a PNG image must start with its IHDR chunk")
        width, height = struct.unpack(">II", self._cut(16, 8))
        position = 8
        data = self.data
        while position + 8 <= len(data):
            length, kind = struct.unpack(">I4s", data[position : position + 8])
            body = data[position + 8 : position + 8 + length]
            if kind == b"eXIf" and self._exif is None:
                self._exif = body[len(_EXIF) :] if body.startswith(_EXIF) else body
            elif kind == b"iTXt" and body.startswith(_XMP_PNG + b"\x00"):
                self._xmp = _itxt_text(body)
            elif kind == b"IEND":
                break
            position += 12 + length
        return width, height

    def _jpeg(self) -> tuple[int, int]:
        data = self.data
        size: tuple[int, int] | None = None
        position = 2
        while True:
            if self._cut(position, 1) != b"\xff":
                raise UnreadableImage("a JPEG marker was expected")
            while self._cut(position, 1) == b"\xff":  # fill bytes
                position += 1
            marker = data[position]
            position += 1
            if marker in _STANDALONE:
                continue
            if marker == 0xDA:  # start of scan: the header is over
                break
            (length,) = struct.unpack(">H", self._cut(position, 2))
            if length < 2:
                raise UnreadableImage(f"a JPEG segment has a length of {length}")
            body = self._cut(position + 2, length - 2)
            if marker in _SOF:
                if len(body) < 5:
                    raise UnreadableImage("the JPEG frame header is too short")
                height, width = struct.unpack(">HH", body[1:5])
                size = (width, height)
            elif marker == 0xE1 and body.startswith(_EXIF) and self._exif is None:
                self._exif = body[len(_EXIF) :]
            elif marker == 0xE1 and body.startswith(_XMP_JPEG):
                self._xmp = body[len(_XMP_JPEG) :]
            position += length
        if size is None:
            raise UnreadableImage("the JPEG image has no frame header (SOF) before its data")
        return size

    def _webp(self) -> tuple[int, int]:
        size: tuple[int, int] | None = None
        for kind, body in self._riff_chunks():
            if kind == b"VP8X" and size is None:
                canvas = self._chunk_bytes(body, 10)
                width = int.from_bytes(canvas[4:7], "little") + 1
                size = (width, int.from_bytes(canvas[7:10], "little") + 1)
            elif kind == b"VP8 " and size is None:
                frame = self._chunk_bytes(body, 10)
                if frame[3:6] != b"\x9d\x01\x2a":
                    raise UnreadableImage("the WebP VP8 frame has no start code")
                width, height = struct.unpack("<HH", frame[6:10])
                size = (width & 0x3FFF, height & 0x3FFF)
            elif kind == b"VP8L" and size is None:
                header = self._chunk_bytes(body, 5)
                if header[0] != 0x2F:
                    raise UnreadableImage("the WebP VP8L stream has no signature")
                bits = int.from_bytes(header[1:5], "little")
                size = ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
            elif kind == b"EXIF" and self._exif is None:
                self._exif = body[len(_EXIF) :] if body.startswith(_EXIF) else body
            elif kind == b"XMP ":
                self._xmp = body
        if size is None:
            raise UnreadableImage("the WebP image has no VP8, VP8L or VP8X chunk")
        return size

    def _riff_chunks(self) -> Iterable[tuple[bytes, bytes]]:
        data = self.data
        position = 12
        while position + 8 <= len(data):
            kind = data[position : position + 4]
            (length,) = struct.unpack("<I", data[position + 4 : position + 8])
            yield kind, data[position + 8 : position + 8 + length]
            position += 8 + length + (length & 1)  # chunks are padded to even sizes

    @staticmethod
    def _chunk_bytes(body: bytes, length: int) -> bytes:
        if len(body) < length:
            raise UnreadableImage("the image data ends inside its header")
        return body

    def _gif(self) -> tuple[int, int]:
        width, height, flags = struct.unpack("<HHB", self._cut(6, 5))
        position = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
        while True:
            introducer = self._cut(position, 1)
            if introducer == b"!":  # an extension: its label, then sub-blocks
                position = self._skip_sub_blocks(position + 2)
            elif introducer == b",":  # the first frame
                left, top, frame_width, frame_height = struct.unpack(
                    "<HHHH", self._cut(position + 1, 8)
                )
                return max(width, left + frame_width), max(height, top + frame_height)
            else:
                return width, height  # the trailer, or no frame: the screen's size

    def _skip_sub_blocks(self, position: int) -> int:
        while True:
            length = self._cut(position, 1)[0]
            position += 1 + length
            if length == 0:
                return position


def _itxt_text(body: bytes) -> bytes | None:
    """The text of a PNG ``iTXt`` chunk (inflated when compressed; None when it does not
    inflate)."""
    keyword_end = body.find(b"\x00")
    compressed = body[keyword_end + 1 : keyword_end + 2] == b"\x01"
    rest = body[keyword_end + 3 :]
    language_end = rest.find(b"\x00")
    translated_end = rest.find(b"\x00", language_end + 1)
    text = rest[translated_end + 1 :]
    if not compressed:
        return text
    try:
        return zlib.decompressobj().decompress(text, _XMP_LIMIT)
    except zlib.error:
        return None


def _tiff_orientation(tiff: bytes) -> int | None:
    """The orientation tag of a TIFF structure's first directory (EXIF), if it has one."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return None
    (offset,) = struct.unpack(order + "I", tiff[4:8])
    if offset + 2 > len(tiff):
        return None
    (count,) = struct.unpack(order + "H", tiff[offset : offset + 2])
    for index in range(count):
        start = offset + 2 + 12 * index
        entry = tiff[start : start + 12]
        if len(entry) < 12:
            return None
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag == _ORIENTATION_TAG and kind == 3:  # SHORT
            (value,) = struct.unpack(order + "H", entry[8:10])
            return int(value)
    return None


def data_url_bytes(url: str) -> bytes | None:
    """The bytes a ``data:`` URL holds (base64 or percent-encoded); None for any other
    URL (``http(s)``: not fetched here)."""
    if url[:5].lower() != "data:":
        return None
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise UnreadableImage("a data URL needs a comma before its data")
    if header.lower().endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise UnreadableImage("the data URL's base64 data is not valid base64") from None
    return unquote_to_bytes(payload)


def image_tokens(size: ImageSize, vision: Vision) -> int:
    """The prompt tokens an image of ``size`` costs (its span, start and end included)."""
    width: float = size.width
    height: float = size.height
    ratio = vision.max_wh_ratio
    if ratio is not None and width > height * ratio:
        width = height * ratio
    area = width * height
    if 0 < area < vision.min_pixels:
        scale = (vision.min_pixels / area) ** 0.5
        width, height = int(width * scale), int(height * scale)
    patch = vision.patch_size
    rows, columns = _token_grid(
        math.ceil(height / patch) * patch, math.ceil(width / patch) * patch, vision
    )
    if _span(rows, columns) > vision.max_tokens:
        rows, columns = _token_grid(*_fitted_pixels(height, width, vision), vision)
    return _span(rows, columns)


def _token_grid(height: int, width: int, vision: Vision) -> tuple[int, int]:
    """Token rows and columns of an image scaled to ``height`` x ``width`` pixels."""
    ratio = vision.downsample_ratio
    patch = vision.patch_size
    return -(-(height // patch) // ratio), -(-(width // patch) // ratio)


def _span(rows: int, columns: int) -> int:
    """Tokens of a grid: each row and its row end, then the span's start and end."""
    return rows * (columns + 1) + 2


def _fitted_pixels(height: float, width: float, vision: Vision) -> tuple[int, int]:
    """The largest pixel size, aspect kept, whose token grid fits ``max_tokens``.

    With ``w`` columns and ``h = w * height / width`` rows the span costs ``h * (w + 1) + 2``
    tokens; the largest ``w`` within the budget solves that quadratic. An image too tall or
    too wide for even one column or row becomes one column or row of the budget's length.
    """
    budget = vision.max_tokens
    cell = vision.patch_size * vision.downsample_ratio
    aspect = height / width
    columns = math.sqrt((budget - 2) / aspect + 0.25) - 0.5
    rows = columns * aspect
    if columns < 1.0:
        return (budget - 2) // 2 * cell, cell
    if rows < 1.0:
        return cell, (budget - 3) * cell
    scale = min(math.floor(columns) * cell / width, math.floor(rows) * cell / height)
    patch = vision.patch_size
    return (
        math.floor(height * scale / patch) * patch,
        math.floor(width * scale / patch) * patch,
    )


@dataclass(frozen=True)
class ImageCount:
    """A conversation's images: how many, the ``tokens`` the spans of those of known size
    take, and the paths of the others (``http(s)`` URLs, fetched by the engine)."""

    images: int = 0
    tokens: int = 0
    uncounted: tuple[str, ...] = ()

    @property
    def extra(self) -> int:
        """The tokens the images add to a prompt that holds one placeholder token for each
        (an image of unknown size adds none: a count with it is a lower bound)."""
        return self.tokens - (self.images - len(self.uncounted))

    def as_json(self) -> dict[str, object]:
        return {"count": self.images, "tokens": self.tokens, "uncounted": list(self.uncounted)}


def conversation_images(conversation: Conversation) -> list[ImagePart]:
    """Every image of the conversation, in order."""
    return [
        part
        for message in conversation.messages
        for part in message.parts
        if isinstance(part, ImagePart)
    ]


def count_images(conversation: Conversation, vision: Vision) -> ImageCount:
    """The tokens the conversation's images add (a 400 naming an image that is not one)."""
    images = conversation_images(conversation)
    tokens = 0
    uncounted = []
    for image in images:
        size = image_size(image)
        if size is None:
            uncounted.append(image.param)
        else:
            tokens += image_tokens(size, vision)
    return ImageCount(len(images), tokens, tuple(uncounted))


def image_size(image: ImagePart) -> ImageSize | None:
    """The size of an image the request holds; None for one given by an ``http(s)`` URL.
    An image that cannot be read is the client's mistake: a 400 naming it."""
    try:
        if image.url is None:
            raise UnreadableImage("the image part has no URL")
        data = data_url_bytes(image.url)
        return None if data is None else ImageHeader(data).size()
    except UnreadableImage as exc:
        raise InvalidRequest(
            f"the image cannot be read: {exc}; send a {FORMATS} image as a data URL or "
            "base64 source",
            image.param,
        ) from None
