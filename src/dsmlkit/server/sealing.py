"""The gateway's key ring: sealed reasoning and thinking signatures with AES-GCM.

``DSMLKIT_STATE_SECRET`` holds one or more secrets separated by commas, each at least
:data:`MIN_SECRET_BYTES` long. The first one seals; every one opens, so a secret can
rotate (put the new one first, keep the old one until its tokens no longer matter,
then drop it) without breaking the tokens clients still hold. Without a setting each
process draws one random secret.

Each secret gives, by HKDF-SHA256, a 256-bit AES key and an 8-byte key id. A token is
``PREFIX`` + base64url (no padding) of::

    version (1 byte) || key id (8) || nonce (12, random) || AES-GCM ciphertext || tag (16)

with associated data ``b"dsmlkit seal\\0"`` + version + key id + purpose + ``b"\\0"`` + the
model name. So a token opens only with the key its id names, for the purpose it was made
for (Responses ``encrypted_content`` or an Anthropic thinking signature, each with its own
prefix) and for the model the request that produced it named; equal texts give different
tokens (the nonce is random). The conversation is not bound: a client may put reasoning it
was given into any other prompt of its own in the clear anyway, so a token gives it no more
than that (see ``docs/server.md``).

Opening checks the size before anything else (a token longer than the largest one
:meth:`KeyRing.seal` can make is refused at once), then requires canonical base64url, then
authenticates; any failure is one :class:`~dsmlkit.api.seal.SealError`.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Sequence
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from dsmlkit.api.seal import SealError
from dsmlkit.errors import CallerError

#: What a token is for; each has its own prefix and is bound to it by the associated data.
Purpose = Literal["reasoning", "thinking"]
PREFIXES: dict[Purpose, str] = {"reasoning": "dsmlkit-r2.", "thinking": "dsmlkit-t2."}
VERSION = 2
#: The shortest secret accepted (in UTF-8 bytes): 256 bits, out of reach of offline guessing.
MIN_SECRET_BYTES = 32
#: The largest text the ring seals: one answer's reasoning, at most the engine's output,
#: which is below 1 Mi tokens (the longest context a DeepSeek model has) of at most 16
#: bytes each on average (DeepSeek's tokenizer averages about 4 on text and code).
MAX_TEXT_BYTES = 16 * 1024 * 1024
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12
_TAG_BYTES = 16
_HEADER_BYTES = 1 + _KEY_ID_BYTES
_OVERHEAD = _HEADER_BYTES + _NONCE_BYTES + _TAG_BYTES
#: The longest body (after the prefix) a token the ring made can have.
MAX_BODY_CHARS = -(-(_OVERHEAD + MAX_TEXT_BYTES) * 4 // 3)
_SALT = b"dsmlkit state secret"
_AD_LABEL = b"dsmlkit seal\0"


def _derive(secret: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=SHA256(), length=length, salt=_SALT, info=info).derive(secret)


def read_secrets(setting: str | None) -> list[bytes]:
    """The secrets of a ``DSMLKIT_STATE_SECRET`` value (None: none set); raises
    :class:`CallerError` for an empty or short one."""
    if setting is None:
        return []
    found = []
    for position, part in enumerate(setting.split(","), 1):
        secret = part.strip().encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise CallerError(
                f"secret {position} is {len(secret)} bytes; each comma-separated secret must "
                f"be at least {MIN_SECRET_BYTES} bytes (e.g. 64 hex digits from "
                "`python3 -c 'import secrets; print(secrets.token_hex(32))'`)"
            )
        found.append(secret)
    return found


class KeyRing:
    """Seals with the first secret, opens with any (a :class:`~dsmlkit.api.seal.Sealer`)."""

    def __init__(self, secrets_: Sequence[bytes]) -> None:
        """``secrets_``: the ring's secrets, the sealing one first (at least one)."""
        if not secrets_:
            raise CallerError("the key ring needs at least one secret")
        self._keys: dict[bytes, AESGCM] = {}
        for secret in secrets_:
            key_id = _derive(secret, b"dsmlkit seal key id", _KEY_ID_BYTES)
            self._keys.setdefault(key_id, AESGCM(_derive(secret, b"dsmlkit seal key", 32)))
        self._sealing = next(iter(self._keys))

    @classmethod
    def from_setting(cls, setting: str | None) -> KeyRing:
        """The ring of a ``DSMLKIT_STATE_SECRET`` value; None: one random secret."""
        return cls(read_secrets(setting) or [secrets.token_bytes(32)])

    def seal(self, text: str, model: str, purpose: Purpose = "reasoning") -> str:
        """``text`` sealed for ``model`` and ``purpose`` with the first secret."""
        plain = text.encode("utf-8", "surrogatepass")
        if len(plain) > MAX_TEXT_BYTES:
            raise SealError(f"cannot seal more than {MAX_TEXT_BYTES} bytes")
        header = bytes([VERSION]) + self._sealing
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._keys[self._sealing].encrypt(nonce, plain, _ad(header, purpose, model))
        body = base64.urlsafe_b64encode(header + nonce + sealed).rstrip(b"=").decode()
        return PREFIXES[purpose] + body

    def try_open(self, token: object, model: object, purpose: Purpose = "reasoning") -> str | None:
        """:meth:`open`, or None for anything that does not open (not a string included)."""
        if not (isinstance(token, str) and isinstance(model, str)):
            return None
        try:
            return self.open(token, model, purpose)
        except SealError:
            return None

    def open(self, token: str, model: str, purpose: Purpose = "reasoning") -> str:
        """The text of a token this ring sealed for ``model`` and ``purpose``; raises
        :class:`SealError` otherwise (the size is checked before anything is decoded)."""
        prefix = PREFIXES[purpose]
        if len(token) > len(prefix) + MAX_BODY_CHARS:
            raise SealError("the token is longer than any this server makes")
        if not token.startswith(prefix):
            raise SealError("not a dsmlkit token of this kind")
        raw = _strict_b64url(token[len(prefix) :])
        if len(raw) < _OVERHEAD or raw[0] != VERSION:
            raise SealError("the token is too short or of another format version")
        header = raw[:_HEADER_BYTES]
        nonce, sealed = raw[_HEADER_BYTES:][:_NONCE_BYTES], raw[_HEADER_BYTES + _NONCE_BYTES :]
        key = self._keys.get(header[1:])
        if key is None:
            raise SealError("the token was sealed with a key this server does not hold")
        try:
            plain = key.decrypt(nonce, sealed, _ad(header, purpose, model))
        except InvalidTag:
            raise SealError("the token was changed, or was made for another model") from None
        return plain.decode("utf-8", "surrogatepass")  # authenticated: what was sealed


def _ad(header: bytes, purpose: Purpose, model: str) -> bytes:
    return _AD_LABEL + header + purpose.encode() + b"\0" + model.encode("utf-8", "surrogatepass")


def _strict_b64url(body: str) -> bytes:
    """Canonical unpadded base64url only: any other spelling of the same bytes is refused."""
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise SealError("the token is not valid base64url") from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != body:
        raise SealError("the token is not canonical base64url")
    return raw
