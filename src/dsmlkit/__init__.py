"""dsmlkit: DeepSeek DSML tool calling for V3.2, V4 and V4.1.

The core (dialects, parser, renderer, API adapters) imports only the standard library.
"""

from dsmlkit._version import __version__
from dsmlkit.dialects import DEFAULT_DIALECT, DIALECTS, Dialect, get_dialect
from dsmlkit.errors import DsmlkitError, InvalidRequest

__all__ = [
    "DEFAULT_DIALECT",
    "DIALECTS",
    "Dialect",
    "DsmlkitError",
    "InvalidRequest",
    "__version__",
    "get_dialect",
]
