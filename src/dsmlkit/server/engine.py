"""What the gateway learns from an engine, and how it turns prompts into what the engine gets.

At start (and on ``/ready``) each model's upstream is read: ``GET …/v1/models`` gives the
served names and ``max_model_len``; ``POST /tokenize`` gives the engine's own ids for every
template token (and one sample sentence). :class:`TokenPlan` then decides per model whether
prompts go as token ids from the loaded tokenizer (only when it agrees with the engine on
every template token it was checked on) or as text, and in text mode breaks template-token
spellings inside user text so that the engine's tokenizer cannot turn them into control
tokens.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsmlkit.render import RenderResult
from dsmlkit.render.templates import SPECIAL_TOKEN_PATTERN, SPECIAL_TOKENS
from dsmlkit.render.tokens import PromptTokenizer
from dsmlkit.server.config import ModelConfig, redacted
from dsmlkit.server.errors import UpstreamError
from dsmlkit.server.upstream import UpstreamClient
from dsmlkit.server.upstream_kinds import Encoded

#: Text whose ids both tokenizers must agree on (plain words, digits, CJK, spaces).
SAMPLE_TEXT = "Hello, world! 1234 你好 ok"
#: Spellings that DeepSeek tokenizers hold as one added token: the template's tokens and
#: any ``<｜…｜>`` token (a V3-era ``<｜tool▁calls▁begin｜>`` included).
CONTROL_SPELLING = re.compile(SPECIAL_TOKEN_PATTERN.pattern + r"|<｜[^｜<>\n]{1,64}｜>")
#: Put after the first character of a control spelling found in user text (text mode).
BREAKER = "\u200b"


@dataclass(frozen=True)
class EngineFacts:
    """One successful reading of an engine; ``token_ids`` is None without a ``/tokenize``."""

    served: tuple[str, ...]
    max_model_len: int | None
    token_ids: Mapping[str, tuple[int, ...]] | None
    read_at: float = field(default_factory=time.time)


@dataclass
class EngineStatus:
    """The last reading of one model's engine: facts, or why there are none."""

    facts: EngineFacts | None = None
    error: str | None = None

    @property
    def reachable(self) -> bool:
        return self.facts is not None and self.error is None


async def read_engine(
    client: UpstreamClient, model: ModelConfig, engine_model: str | None, api_key: str | None
) -> EngineFacts:
    """Read the engine behind ``model``: ``/v1/models``, then ``/tokenize`` (if served)."""
    base, root = model.upstream_api_base, model.upstream_root
    assert base is not None and root is not None
    auth = model.kind.auth_headers(api_key)
    listing = await client.get_json(base + "/models", auth)
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        raise UpstreamError(
            "malformed",
            "the engine's /v1/models did not list models",
            url=redacted(base + "/models"),
        )
    served = tuple(str(c["id"]) for c in cards if isinstance(c, dict) and "id" in c)
    name = engine_model if engine_model is not None else (served[0] if served else None)
    card = next((c for c in cards if isinstance(c, dict) and c.get("id") == name), {})
    length = card.get("max_model_len")
    max_model_len = length if isinstance(length, int) and length > 0 else None
    token_ids = None
    if model.kind.reads_token_ids:
        token_ids = await _engine_token_ids(client, root, name, auth)
    return EngineFacts(served, max_model_len, token_ids)


async def _engine_token_ids(
    client: UpstreamClient, root: str, name: str | None, auth: Mapping[str, str]
) -> dict[str, tuple[int, ...]] | None:
    """The engine's ids for each template token and for :data:`SAMPLE_TEXT`; None when the
    engine has no ``/tokenize``."""
    ids: dict[str, tuple[int, ...]] = {}
    for text in (*SPECIAL_TOKENS, SAMPLE_TEXT):
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if name is not None:
            body["model"] = name
        try:
            answer = await client.get_json(root + "/tokenize", auth, body)
        except UpstreamError as exc:
            if exc.kind == "status" and exc.status in (404, 405):
                return None
            raise
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise UpstreamError(
                "malformed",
                "the engine's /tokenize did not answer with tokens",
                url=redacted(root + "/tokenize"),
            )
        ids[text] = tuple(tokens)
    return ids


@dataclass(frozen=True)
class TokenPlan:
    """How one model's prompts are encoded; ``summary`` says it in one line."""

    tokenizer: PromptTokenizer | None
    use_ids: bool
    summary: str

    @classmethod
    def decide(
        cls, tokenizer: PromptTokenizer | None, description: str, facts: EngineFacts | None
    ) -> TokenPlan:
        """Ids only from a tokenizer that agrees with the engine on every checked token."""
        if tokenizer is None:
            return cls(None, False, f"text prompts (no tokenizer: {description})")
        if facts is None or facts.token_ids is None:
            return cls(tokenizer, True, f"token ids from {description} (not checked: no engine)")
        differ = [
            text
            for text, engine_ids in facts.token_ids.items()
            if tuple(tokenizer.encode_text(text, special=True)) != engine_ids
        ]
        if differ:
            shown = ", ".join(differ[:3]) + (" …" if len(differ) > 3 else "")
            return cls(
                tokenizer,
                False,
                f"text prompts: {description} disagrees with the engine's /tokenize on "
                f"{shown}; give --tokenizer PATH (the served model's tokenizer.json) "
                "for token ids",
            )
        checked = len(facts.token_ids)
        return cls(tokenizer, True, f"token ids from {description} ({checked} checks agree)")

    def encode(self, result: RenderResult) -> Encoded:
        """The prompt for the engine: ids when every template token it uses is one token
        of the tokenizer, else text whose user parts cannot become control tokens."""
        if self.use_ids and self.tokenizer is not None:
            missing = _missing_tokens(self.tokenizer, result)
            if not missing:
                return Encoded(self.tokenizer.encode_prompt(result), result.prompt, ())
            reason = (
                f"token_ids is null: tokenizer {self.tokenizer.name} has no "
                f"{', '.join(missing)}, which this prompt uses; the prompt goes as text "
                "(give --tokenizer PATH, the model's tokenizer.json, for ids)"
            )
        else:
            reason = f"token_ids is null: {self.summary}"
        text, broken = _neutralized_prompt(result)
        notes = [reason]
        if broken:
            notes.append(
                f"{broken} control-token spelling(s) in message text were broken with "
                "U+200B so that the engine reads them as text"
            )
        return Encoded(None, text, tuple(notes))


def _missing_tokens(tokenizer: PromptTokenizer, result: RenderResult) -> list[str]:
    found = {
        token
        for text, is_control in result.pieces
        if is_control
        for token in SPECIAL_TOKEN_PATTERN.findall(text)
    }
    return sorted(token for token in found if tokenizer.token_id(token) is None)


def _neutralized_prompt(result: RenderResult) -> tuple[str, int]:
    """The prompt text with every control spelling outside template pieces broken by
    :data:`BREAKER`, and how many were broken."""
    parts: list[str] = []
    broken = 0
    for text, is_control in result.pieces:
        if is_control:
            parts.append(text)
            continue
        new, count = CONTROL_SPELLING.subn(lambda m: m.group()[0] + BREAKER + m.group()[1:], text)
        parts.append(new)
        broken += count
    return "".join(parts), broken
