"""Sealed reasoning: ``encrypted_content`` that only the server that made it can read back.

A stateless Responses client (``store: false`` with ``include:
["reasoning.encrypted_content"]``) sends the reasoning items it received back on its next
request. The reasoning text travels sealed, so the client cannot read or alter it, and the
server restores it without keeping any state.

The adapters do no cryptography themselves: they take a :class:`Sealer`. The gateway's is
its key ring (AES-GCM with HKDF-derived keys, ``dsmlkit.server.sealing``); a library user
passes any object with these two methods.
"""

from __future__ import annotations

from typing import Protocol

from dsmlkit.errors import CallerError


class SealError(CallerError):
    """A token that this sealer did not make for this model (or that was changed since)."""


class Sealer(Protocol):
    """Seals reasoning text into an opaque ASCII token bound to a model, and opens it."""

    def seal(self, text: str, model: str) -> str:
        """``text`` as a token that :meth:`open` gives back for the same ``model``."""
        ...

    def open(self, token: str, model: str) -> str:
        """The text ``token`` holds; :class:`SealError` unless this sealer made it for
        ``model`` and it is unchanged."""
        ...
