"""``dsmlkit serve``: render endpoints and a DSML gateway in front of real engines.

Needs the ``[server]`` extra (FastAPI, uvicorn, aiohttp). :func:`create_app` builds the ASGI
app from a :class:`ServerConfig`; see ``docs/server.md`` for the routes.
"""

from dsmlkit.server.app import create_app
from dsmlkit.server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
