"""Images for the tests, encoded with the standard library."""

from __future__ import annotations

import base64
import struct
import zlib


def png(width: int, height: int, *chunks: tuple[bytes, bytes]) -> bytes:
    """A valid grey PNG of that size, with ``chunks`` (type, data) after its header."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * (width + 1) * height)
    extra = b"".join(chunk(kind, data) for kind, data in chunks)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + extra
        + chunk(b"IDAT", pixels)
        + chunk(b"IEND", b"")
    )


def base64_png(width: int, height: int) -> str:
    return base64.b64encode(png(width, height)).decode()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"
