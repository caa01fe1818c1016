"""What ``dsmlkit serve`` was started with: one frozen record, validated up front."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from dsmlkit.dialects import get_dialect

UpstreamApi = Literal["completions", "chat"]

#: ``--tokenizer none`` turns token ids off (prompts go upstream as text).
NO_TOKENIZER = "none"

_VERSION_SEGMENT = re.compile(r"/v\d+$")


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one server; the upstream URL comes only from here, never from a request.

    ``upstream_api_key`` is sent to the upstream as a bearer token; when it is unset and the
    server has no ``api_key`` of its own, the client's own key is forwarded instead.
    """

    dialect: str = "v4.1"
    model: str | None = None
    upstream: str | None = None
    upstream_api: UpstreamApi = "completions"
    tokenizer: str | None = None
    api_key: str | None = None
    upstream_api_key: str | None = None
    upstream_timeout: float = 600.0
    connect_timeout: float = 10.0
    max_body_bytes: int = 32 * 1024 * 1024
    #: ``memory``, ``sqlite:PATH`` or ``redis://HOST:PORT/DB`` (see :mod:`.state_store`).
    state: str = "memory"
    #: Signs Anthropic thinking blocks (see :mod:`.reasoning_store`) and seals Responses
    #: reasoning (``encrypted_content``, :mod:`dsmlkit.api.seal`); default: random.
    state_secret: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dialect", get_dialect(self.dialect).name)
        if self.upstream_api not in ("completions", "chat"):
            raise ValueError(
                f"upstream_api must be 'completions' or 'chat', not {self.upstream_api!r}"
            )
        if self.upstream is not None:
            parts = urlsplit(self.upstream)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"upstream must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                    f"not {self.upstream!r}"
                )
        if self.upstream_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")

    @property
    def served_model(self) -> str:
        """The model name this server lists and sends to a completions upstream."""
        return self.model or f"deepseek-{self.dialect}"

    @property
    def upstream_endpoint(self) -> str | None:
        """The full URL requests go to: ``…/v1/completions`` or ``…/v1/chat/completions``.

        A URL already ending in ``/completions`` is used as given; one ending in a version
        segment (``/v1``, ``/api/v1``) gets the route appended; anything else gets ``/v1/…``.
        """
        if self.upstream is None:
            return None
        route = "/completions" if self.upstream_api == "completions" else "/chat/completions"
        base = self.upstream.rstrip("/")
        path = urlsplit(base).path
        if path.endswith("/completions"):
            return base
        if _VERSION_SEGMENT.search(path):
            return base + route
        return base + "/v1" + route
