"""The gateway's key ring (AES-GCM, HKDF): what a token is bound to, rotation, and tokens
refused before any work is done on them."""

from __future__ import annotations

import base64
import time

import pytest

from dsmlkit.api.seal import SealError
from dsmlkit.errors import CallerError
from dsmlkit.server.config import ConfigError, ServerConfig
from dsmlkit.server.sealing import (
    MAX_BODY_CHARS,
    MAX_TEXT_BYTES,
    PREFIXES,
    KeyRing,
    read_secrets,
)

OLD, NEW = b"o" * 32, b"n" * 32
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
TEXT = "Thinking about ünïcode and a long line " * 5


def test_a_token_opens_for_its_model_and_purpose_only() -> None:
    ring = KeyRing([OLD])
    token = ring.seal(TEXT, "m")
    assert token.startswith(PREFIXES["reasoning"]) and "ünïcode" not in token
    assert ring.open(token, "m") == TEXT
    assert ring.seal(TEXT, "m") != token  # random nonce: equal texts, different tokens
    assert ring.open(ring.seal("", "m"), "m") == ""
    with pytest.raises(SealError, match="another model"):
        ring.open(token, "m2")
    signature = ring.seal(TEXT, "m", "thinking")
    assert signature.startswith(PREFIXES["thinking"])
    with pytest.raises(SealError):
        ring.open(signature, "m")  # a thinking signature is no reasoning token
    with pytest.raises(SealError):
        ring.open(PREFIXES["thinking"] + token.removeprefix(PREFIXES["reasoning"]), "m", "thinking")


def test_every_changed_byte_is_refused() -> None:
    ring = KeyRing([OLD])
    token = ring.seal("short text", "m")
    prefix, body = PREFIXES["reasoning"], token.removeprefix(PREFIXES["reasoning"])
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    for index in range(len(raw)):  # version, key id, nonce, ciphertext, tag
        changed = bytearray(raw)
        changed[index] ^= 0x01
        forged = prefix + base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        with pytest.raises(SealError):
            ring.open(forged, "m")
    with pytest.raises(SealError):
        KeyRing([NEW]).open(token, "m")


def test_the_first_secret_seals_and_every_one_opens() -> None:
    old_token = KeyRing([OLD]).seal(TEXT, "m")
    rotated = KeyRing([NEW, OLD])
    assert rotated.open(old_token, "m") == TEXT
    assert KeyRing([NEW]).open(rotated.seal(TEXT, "m"), "m") == TEXT
    with pytest.raises(SealError, match="does not hold"):
        KeyRing([NEW]).open(old_token, "m")


@pytest.mark.parametrize(
    "spelling",
    ["padded", "standard alphabet", "trailing bits", "whitespace", "junk character"],
)
def test_only_canonical_base64url_is_read(spelling: str) -> None:
    ring = KeyRing([OLD])
    body = ring.seal("x" * 10, "m").removeprefix(PREFIXES["reasoning"])
    assert len(body) % 4, "the test needs a body whose last group is short"
    last = ALPHABET.index(body[-1])
    other = {
        "padded": body + "=" * (-len(body) % 4),
        "standard alphabet": body.replace("-", "+").replace("_", "/") + "+/",
        "trailing bits": body[:-1] + ALPHABET[last ^ 1],  # the same bytes, unused bits set
        "whitespace": body[:8] + "\n" + body[8:],
        "junk character": body[:8] + "!" + body[8:],
    }[spelling]
    with pytest.raises(SealError):
        ring.open(PREFIXES["reasoning"] + other, "m")


def test_a_huge_token_is_refused_before_any_decoding() -> None:
    """24 MB of garbage costs a length check, not a decryption."""
    ring = KeyRing([OLD])
    garbage = PREFIXES["reasoning"] + "A" * (24 * 1024 * 1024)
    started = time.perf_counter()
    with pytest.raises(SealError, match="longer than any"):
        ring.open(garbage, "m")
    assert time.perf_counter() - started < 0.01
    with pytest.raises(SealError):
        ring.seal("x" * (MAX_TEXT_BYTES + 1), "m")


def test_the_largest_token_the_ring_makes_is_read() -> None:
    ring = KeyRing([OLD])
    text = "x" * MAX_TEXT_BYTES
    token = ring.seal(text, "m")
    assert len(token) - len(PREFIXES["reasoning"]) <= MAX_BODY_CHARS
    assert ring.open(token, "m") == text


def test_secrets_are_read_from_a_comma_separated_setting() -> None:
    assert read_secrets(None) == []
    assert read_secrets(f" {NEW.decode()} , {OLD.decode()}") == [NEW, OLD]
    for bad in ("short", f"{NEW.decode()},", f"{NEW.decode()},,{OLD.decode()}"):
        with pytest.raises(CallerError, match="at least 32 bytes"):
            read_secrets(bad)
    with pytest.raises(ConfigError) as caught:
        ServerConfig(state_secret="s" * 31)
    assert caught.value.where == "state_secret"
    with pytest.raises(SealError):  # each process draws its own secret
        KeyRing.from_setting(None).open(KeyRing.from_setting(None).seal("a", "m"), "m")
