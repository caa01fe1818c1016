"""The parser names dsmlkit registers in the engines, and the dialect each one means."""

from __future__ import annotations

from typing import Final

#: ``--tool-call-parser`` / ``--reasoning-parser`` name -> dsmlkit dialect.
PARSER_DIALECTS: Final = {"dsmlkit_v32": "v3.2", "dsmlkit_v4": "v4", "dsmlkit_v41": "v4.1"}
