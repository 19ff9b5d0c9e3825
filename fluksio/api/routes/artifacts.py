"""Artifacts over HTTP beside the attach socket (protocol.md, "Artifacts").

``PUT /artifacts?name=&media_type=``  the raw bytes; the engine hashes what it receives
                                      (``X-Fluksio-Digest: sha256:...`` makes a mismatch a 422)
``GET /artifacts/{digest}``           the bytes, streamed, ``Range`` supported, ``ETag``
``HEAD /artifacts/{digest}``          whether the engine has them (so uploads can be skipped)

Authenticated on every request by a worker token, an artifact token minted for one call,
or a superuser's access token: revoking a worker token blocks its artifacts at once.
"""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import ARTIFACTS, SETTINGS, TOKENS
from fluksio.api.artifacts.store import ArtifactError
from fluksio.api.auth import bearer_token
from fluksio.api.errors import InvalidInput, NotFound
from fluksio.api.logging import get_logger
from fluksio.api.responses import model_response

__all__ = ["routes"]

log = get_logger(__name__)
DIGEST_HEADER = "X-Fluksio-Digest"
_CHUNK = 1 << 20


class ArtifactRef(BaseModel):
    """A stored artifact: what a result carries to refer to it."""

    digest: str
    """``sha256:<hex>`` of the bytes the engine received."""
    size: int
    media_type: str
    name: str


def _authorize(request: web.Request) -> str:
    return request.app[TOKENS].verify_artifact_access(bearer_token(request))


async def _put(request: web.Request) -> web.Response:
    who = _authorize(request)
    name = request.query.get("name", "")
    media_type = request.query.get("media_type") or "application/octet-stream"
    if len(name) > 255 or "/" in name or "\x00" in name:
        raise InvalidInput("name", "must be a file name of at most 255 characters, without '/'")
    if len(media_type) > 127 or "/" not in media_type:
        raise InvalidInput("media_type", "must be a media type such as application/octet-stream")
    try:
        stored = await request.app[ARTIFACTS].put(
            request.content.iter_chunked(_CHUNK),
            expected=request.headers.get(DIGEST_HEADER),
            max_bytes=request.app[SETTINGS].max_artifact_bytes,
            declared_size=request.content_length,
        )
    except ArtifactError as error:
        raise InvalidInput(error.field, error.detail) from None
    log.info("artifact.stored", digest=stored.digest, size=stored.size, by=who)
    body = ArtifactRef(digest=stored.digest, size=stored.size, media_type=media_type, name=name)
    return model_response(body, status=201)


def _stored(request: web.Request) -> web.FileResponse:
    _authorize(request)
    digest = request.match_info["digest"]
    try:
        found = request.app[ARTIFACTS].find(digest)
    except ArtifactError as error:
        raise InvalidInput(error.field, error.detail) from None
    if found is None:
        raise NotFound(f"no artifact {digest}")
    response = web.FileResponse(found.path, chunk_size=_CHUNK)
    response.headers["ETag"] = f'"{digest}"'
    response.headers["Cache-Control"] = "private, max-age=31536000, immutable"
    response.content_type = "application/octet-stream"
    return response


async def _get(request: web.Request) -> web.StreamResponse:
    return _stored(request)


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.put(f"{prefix}/artifacts", _put),
        web.get(f"{prefix}/artifacts/{{digest}}", _get, allow_head=True),
    ]
