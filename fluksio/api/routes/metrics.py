"""``GET /metrics`` for Prometheus, and the scrape tokens that may read it.

``GET /metrics``                          the text exposition format (a scrape token or a
                                          superuser's access token; never open)
``POST /api/v1/metrics/tokens`` {name}    mint a scrape token, shown once (superuser)
``GET /api/v1/metrics/tokens``            the scrape tokens, never their text (superuser)
``POST /api/v1/metrics/tokens/{id}/revoke``  revoke one (superuser)
"""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.engine.metrics import CONTENT_TYPE
from fluksio.wire.answers.tokens import MintedScrapeToken, ScrapeTokenBody
from fluksio.wire.requests import ScrapeTokenRequest

__all__ = ["MintedScrapeToken", "ScrapeTokenBody", "routes"]

routes = Routes()
outside_api = Routes(prefix="")


@outside_api.get("/metrics", auth="scrape", media="text/plain")
async def _metrics(call: Call[None]) -> web.Response:
    """Prometheus metrics, in the text exposition format"""
    return web.Response(
        body=call.app[ENGINE].metrics.render(), headers={"Content-Type": CONTENT_TYPE}
    )


@routes.post(
    "/metrics/tokens",
    auth="superuser",
    answer=MintedScrapeToken,
    status=201,
    body=ScrapeTokenRequest,
    errors=(422,),
)
async def _mint(call: Call[ScrapeTokenRequest]) -> MintedScrapeToken:
    """Mint a scrape token (its text is in this answer only)"""
    return call.app[ENGINE].mint_scrape_token(call.body.name, by=call.superuser.username)


@routes.get("/metrics/tokens", auth="superuser", answer=ScrapeTokenBody, many=True)
async def _list(call: Call[None]) -> list[ScrapeTokenBody]:
    """Every scrape token, never its text"""
    return call.app[ENGINE].scrape_token_list()


@routes.post(
    "/metrics/tokens/{token_id}/revoke", auth="superuser", answer=ScrapeTokenBody, errors=(404,)
)
async def _revoke(call: Call[None]) -> ScrapeTokenBody:
    """Revoke a scrape token"""
    return call.app[ENGINE].revoke_scrape_token(call.request.match_info["token_id"])
