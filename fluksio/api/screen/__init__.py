"""The Workers screen: one static page, served by the engine, that reads the public API.

``GET /``                 redirects to ``/workers``
``GET /workers``          the page (HTML; it logs in and follows the API's event feed itself)
``GET /static/{name}``    its script and style sheet, shipped in this package

No build step and nothing from a CDN: the page works offline. It talks only to
``/api/v1`` with the superuser's access token, kept in the browser's session storage and
sent in the ``Authorization`` header, never in a URL. A strict Content-Security-Policy
allows nothing but this origin's own files (no inline script), so data from the API can
never run as code. See docs/workers-screen.md.
"""

from __future__ import annotations

from importlib.resources import files

from aiohttp import web

from fluksio.api.declare import Call, Routes

__all__ = ["routes"]

routes = Routes(prefix="")

_STATIC = files(__package__) / "static"
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Small files, and a new engine version must show at once: revalidate every time.
    "Cache-Control": "no-cache",
}


def _file(name: str) -> web.Response:
    path = _STATIC / name
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or suffix not in _TYPES or not path.is_file():
        raise web.HTTPNotFound(text="no such file")
    return web.Response(
        body=path.read_bytes(), content_type=_TYPES[suffix], charset="utf-8", headers=_HEADERS
    )


@routes.get("/", auth="none", status=302, media="none")
async def _home(_call: Call[None]) -> web.Response:
    """Redirects to the Workers screen"""
    raise web.HTTPFound("/workers")


@routes.get("/workers", auth="none", media="text/html")
async def _page(_call: Call[None]) -> web.Response:
    """The Workers screen (HTML)"""
    return _file("workers.html")


@routes.get("/static/{name}", auth="none", media="text/*", errors=(404,))
async def _static(call: Call[None]) -> web.Response:
    """The screen's script and style sheet"""
    return _file(call.request.match_info["name"])
