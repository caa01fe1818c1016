"""dsmlkit's one error hierarchy, split by whose fault an error is.

* :class:`CallerError` — the code or person calling dsmlkit did something wrong (a bad
  argument, a parser fed after ``close()``). Raised at once.

  * :class:`InvalidRequest` — a client's request or a conversation is wrong; carries the
    request's own ``param`` path.
  * :class:`UsageError` — a command-line problem (bad flags, unreadable file).

* :class:`InternalError` — a check inside dsmlkit found its own state impossible: a bug,
  never the caller's or the model's doing.

The API layer adds the errors a server answers clients with, in each API's vocabulary
(:mod:`dsmlkit.api.errors`: ``ApiError`` with its status and type); the server adds its
upstream's failures (:mod:`dsmlkit.server.errors`). Model output never raises: what a model
writes becomes content, calls or diagnostics.
"""

from __future__ import annotations


class DsmlkitError(Exception):
    """Base class of every error dsmlkit raises on purpose."""


class CallerError(DsmlkitError, ValueError):
    """The caller used dsmlkit wrongly; the message says what to do instead."""


class InternalError(DsmlkitError, RuntimeError):
    """dsmlkit found its own state impossible (a bug: please report it with the input)."""


class UsageError(CallerError):
    """A command-line problem (exit code 2): a bad flag combination or unreadable input."""


class InvalidRequest(CallerError):
    """A conversation, request or option is wrong; ``param`` names the field.

    ``param`` uses the request's own path syntax, e.g. ``messages[3].content[1]``, so the
    API adapters put it straight into the error body.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message


def install_hint(extra: str) -> str:
    """How to install dsmlkit with ``extra`` (``server``, ``tokenizer``): dsmlkit is not on a
    package index yet, so from a checkout or from a wheel built from one."""
    from dsmlkit._version import __version__

    return (
        f"pip install '.[{extra}]' in a dsmlkit checkout, or "
        f"pip install 'dsmlkit-{__version__}-py3-none-any.whl[{extra}]' from a built wheel"
    )
