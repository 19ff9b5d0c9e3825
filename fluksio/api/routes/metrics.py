"""``GET /metrics`` for Prometheus, and the scrape tokens that may read it.

``GET /metrics``                          the text exposition format (a scrape token or a
                                          superuser's access token; never open)
``POST /api/v1/metrics/tokens`` {name}    mint a scrape token, shown once (superuser)
``GET /api/v1/metrics/tokens``            the scrape tokens, never their text (superuser)
``POST /api/v1/metrics/tokens/{id}/revoke``  revoke one (superuser)
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import METRICS, SCRAPE_TOKENS
from fluksio.api.auth import bearer_token, require_superuser
from fluksio.api.bodies import read_json
from fluksio.api.openapi import Operation, documented
from fluksio.api.responses import model_response
from fluksio.api.timefmt import utc
from fluksio.engine.errors import NotAuthenticated, NotFound
from fluksio.engine.logging import get_logger
from fluksio.engine.metrics import CONTENT_TYPE
from fluksio.engine.models import ScrapeTokenRequest
from fluksio.engine.scrape_tokens import PREFIX, ScrapeTokenRecord

__all__ = ["MintedScrapeToken", "ScrapeTokenBody", "routes"]

log = get_logger(__name__)


class ScrapeTokenBody(BaseModel):
    id: str
    name: str
    status: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class MintedScrapeToken(ScrapeTokenBody):
    """The one answer that holds the token's text: put it in Prometheus's
    ``authorization.credentials_file``."""

    token: str


def _body(record: ScrapeTokenRecord) -> ScrapeTokenBody:
    return ScrapeTokenBody(
        id=record.id,
        name=record.name,
        status=record.status,
        created_at=utc(record.created_at),
        created_by=record.created_by,
        revoked_at=utc(record.revoked_at),
    )


@documented(
    Operation(
        summary="Prometheus metrics, in the text exposition format",
        auth="scrape",
        media="text/plain",
    )
)
async def _metrics(request: web.Request) -> web.Response:
    token = bearer_token(request)
    if token.startswith(PREFIX):
        if not request.app[SCRAPE_TOKENS].valid(token):
            raise NotAuthenticated("the scrape token is unknown or revoked")
    else:
        require_superuser(request)
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


@documented(
    Operation(
        summary="Mint a scrape token (its text is in this answer only)",
        auth="superuser",
        answer=MintedScrapeToken,
        status=201,
        body=ScrapeTokenRequest,
        errors=(422,),
    )
)
async def _mint(request: web.Request) -> web.Response:
    user = require_superuser(request)
    body = await read_json(request, ScrapeTokenRequest)
    token, record = request.app[SCRAPE_TOKENS].mint(body.name, created_by=user.username)
    log.info("scrape_token.minted", id=record.id, name=record.name)
    answer = MintedScrapeToken(token=token, **_body(record).model_dump())
    return model_response(answer, status=201)


@documented(
    Operation(
        summary="Every scrape token, never its text",
        auth="superuser",
        answer=ScrapeTokenBody,
        many=True,
    )
)
async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    return model_response([_body(record) for record in request.app[SCRAPE_TOKENS].list()])


@documented(
    Operation(
        summary="Revoke a scrape token",
        auth="superuser",
        answer=ScrapeTokenBody,
        errors=(404,),
    )
)
async def _revoke(request: web.Request) -> web.Response:
    require_superuser(request)
    token_id = request.match_info["token_id"]
    record = request.app[SCRAPE_TOKENS].revoke(token_id)
    if record is None:
        raise NotFound(f"no scrape token with id {token_id!r}")
    log.info("scrape_token.revoked", id=record.id, name=record.name)
    return model_response(_body(record))


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get("/metrics", _metrics),
        web.post(f"{prefix}/metrics/tokens", _mint),
        web.get(f"{prefix}/metrics/tokens", _list),
        web.post(f"{prefix}/metrics/tokens/{{token_id}}/revoke", _revoke),
    ]
