"""``GET /ui``: the inspector, a static page for looking at what the parser and renderer do.

The page (``dsmlkit/server/ui/``: one HTML file, one script, one style sheet) is shipped in
the package and served as it is: no build step, nothing fetched from anywhere but this
server (its Content-Security-Policy says so to the browser too). It calls the server's own
``/v1/parse`` (with ``chunk_size``, for the event stream) and render routes.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter()

#: The page's files: URL path → (file name in ``dsmlkit/server/ui``, media type).
PAGE_FILES = {
    "/ui": ("index.html", "text/html; charset=utf-8"),
    "/ui/inspector.js": ("inspector.js", "text/javascript; charset=utf-8"),
    "/ui/inspector.css": ("inspector.css", "text/css; charset=utf-8"),
}

#: Everything the page loads or calls comes from this server; no inline script or style.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def _page_file(path: str) -> Response:
    name, media_type = PAGE_FILES[path]
    body = files("dsmlkit.server").joinpath("ui").joinpath(name).read_bytes()
    return Response(
        body,
        media_type=media_type,
        headers={
            "content-security-policy": CONTENT_SECURITY_POLICY,
            "x-content-type-options": "nosniff",
            "cache-control": "no-cache",
        },
    )


@router.get("/ui")
async def inspector_page() -> Response:
    return _page_file("/ui")


@router.get("/ui/inspector.js")
async def inspector_script() -> Response:
    return _page_file("/ui/inspector.js")


@router.get("/ui/inspector.css")
async def inspector_style() -> Response:
    return _page_file("/ui/inspector.css")
