"""Sealed reasoning: ``encrypted_content`` that only the holder of a key can read back.

A stateless Responses client (``store: false`` with ``include:
["reasoning.encrypted_content"]``) sends the reasoning items it received back on its next
request. The reasoning text travels sealed, so the client cannot read or alter it, and the
server restores it without keeping any state.

Construction (standard library only): a deterministic authenticated cipher in the SIV
style. From the key two sub-keys are derived with HMAC-SHA256. The 32-byte synthetic IV is
``HMAC(mac_key, plaintext)``; the keystream is ``HMAC(enc_key, iv || counter)`` blocks
(counter mode with HMAC as the PRF); the token is ``dsmlkit-r1.`` + base64url(iv ||
ciphertext). Opening recomputes the IV from the decrypted text and compares in constant
time, so a wrong key, a foreign token or any changed byte is refused. Equal texts seal to
equal tokens (the only thing the token reveals besides the text's length).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from dsmlkit.errors import CallerError

PREFIX = "dsmlkit-r1."
_BLOCK = hashlib.sha256().digest_size


class SealError(CallerError):
    """A token that this key did not seal (or that was changed since)."""


def _subkeys(key: bytes) -> tuple[bytes, bytes]:
    if not key:
        raise CallerError("the sealing key must not be empty")
    enc = hmac.new(key, b"dsmlkit reasoning encryption", hashlib.sha256).digest()
    mac = hmac.new(key, b"dsmlkit reasoning authentication", hashlib.sha256).digest()
    return enc, mac


def _keystream_xor(enc_key: bytes, iv: bytes, data: bytes) -> bytes:
    blocks = (len(data) + _BLOCK - 1) // _BLOCK
    stream = b"".join(
        hmac.new(enc_key, iv + counter.to_bytes(8, "big"), hashlib.sha256).digest()
        for counter in range(blocks)
    )
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream[: len(data)], "big")).to_bytes(
        len(data), "big"
    )


def seal(key: bytes, text: str) -> str:
    """``text`` sealed with ``key`` as an opaque ASCII token."""
    enc_key, mac_key = _subkeys(key)
    plain = text.encode("utf-8")
    iv = hmac.new(mac_key, plain, hashlib.sha256).digest()
    sealed = iv + _keystream_xor(enc_key, iv, plain)
    return PREFIX + base64.urlsafe_b64encode(sealed).decode("ascii").rstrip("=")


def unseal(key: bytes, token: str) -> str:
    """The text ``token`` holds; :class:`SealError` unless ``key`` sealed it unchanged."""
    enc_key, mac_key = _subkeys(key)
    if not token.startswith(PREFIX):
        raise SealError("not a dsmlkit reasoning token")
    body = token[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise SealError("the token is not valid base64url") from None
    if len(raw) < _BLOCK:
        raise SealError("the token is too short")
    iv, cipher = raw[:_BLOCK], raw[_BLOCK:]
    plain = _keystream_xor(enc_key, iv, cipher)
    if not hmac.compare_digest(iv, hmac.new(mac_key, plain, hashlib.sha256).digest()):
        raise SealError("the token was not sealed with this server's key, or was changed")
    return plain.decode("utf-8")  # authenticated, so it is the UTF-8 that was sealed
