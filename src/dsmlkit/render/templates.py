"""The reference encoders' string constants that every dialect shares.

Role and task tokens, the special-token pattern and the response-format text; what differs
between dialects (tools sections, effort texts) is part of each :class:`Dialect` value.
Every string here is what DeepSeek's encoders put in a prompt, byte for byte.
"""

from __future__ import annotations

import re

from dsmlkit.dialects import BOS, EOS, MARKER, TASK_TOKENS, THINK_CLOSE, THINK_OPEN

USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SYSTEM = "<｜System｜>"
LATEST_REMINDER = "<｜latest_reminder｜>"
IMAGE = "<｜deepseek_image｜>"

#: Strings that are one special/added token when the template writes them.
SPECIAL_TOKENS: tuple[str, ...] = (
    BOS,
    EOS,
    USER,
    ASSISTANT,
    SYSTEM,
    LATEST_REMINDER,
    IMAGE,
    THINK_OPEN,
    THINK_CLOSE,
    MARKER,
    *TASK_TOKENS.values(),
)

#: Finds special tokens inside template text (longest first, so none shadows another).
SPECIAL_TOKEN_PATTERN = re.compile(
    "|".join(re.escape(token) for token in sorted(SPECIAL_TOKENS, key=len, reverse=True))
)

RESPONSE_FORMAT = (
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"
)
