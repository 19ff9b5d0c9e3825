"""The engine's HTTP face: ``create_app(settings)`` builds one :class:`Engine` and serves it.

The engine (``fluksio.engine.front.engine``) is kept under the one app key ``ENGINE``; it is
started in a cleanup context and closed after, so a test can build as many apps as it
likes and each closes what it opened. What is the HTTP layer's own (the throttles, the
live feed's translation of the stream) is made here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from fluksio.api.appkeys import CREDENTIAL_THROTTLE, ENGINE, LOGIN_GUARD
from fluksio.api.middlewares import (
    credential_throttle_middleware,
    error_middleware,
    request_context_middleware,
)
from fluksio.api.proxies import forwarded_middleware, parse_trusted_proxies
from fluksio.api.routes import add_routes
from fluksio.api.throttle import LoginGuard, LoginThrottle
from fluksio.clock import Clock
from fluksio.engine.front.engine import Engine
from fluksio.engine.postgres.fence import Fence
from fluksio.engine.provisioning import Configured
from fluksio.engine.settings import EngineSettings
from fluksio.logs import LogSecrets

__all__ = ["create_app"]


def create_app(
    settings: EngineSettings,
    *,
    provisioners: Configured | None = None,
    clock: Clock | None = None,
    address: tuple[str, int] | None = None,
    log_secrets: LogSecrets | None = None,
    fence: Fence | None = None,
) -> web.Application:
    """The engine; ``provisioners`` as already loaded, else read from the data dir at start.

    ``clock`` is the engine's one clock (every reading of time, every timer); tests pass
    one they advance. ``address`` is where it listens, ``log_secrets`` what its logs never
    show, ``fence`` the lease it writes under, on the active engine of several (see
    :class:`Engine`).
    """
    proxies = parse_trusted_proxies(settings.trusted_proxies)
    app = web.Application(
        middlewares=[
            *([forwarded_middleware(proxies)] if proxies else []),
            request_context_middleware,
            error_middleware,
            credential_throttle_middleware,
        ],
        client_max_size=settings.client_max_size,
    )
    app[ENGINE] = Engine(
        settings,
        provisioners=provisioners,
        clock=clock,
        address=address,
        log_secrets=log_secrets,
        fence=fence,
    )
    app[LOGIN_GUARD] = LoginGuard(
        free_failures=settings.login_free_failures,
        base_delay_s=settings.login_base_delay_s,
        max_delay_s=settings.login_max_delay_s,
    )
    # An address may host many clients (a NAT, a cluster's login node), as for logins.
    app[CREDENTIAL_THROTTLE] = LoginThrottle(
        free_failures=settings.login_free_failures * 4,
        base_delay_s=settings.login_base_delay_s,
        max_delay_s=settings.login_max_delay_s,
    )
    app.cleanup_ctx.append(_engine_running)
    app.on_shutdown.append(_stop_serving)
    add_routes(app)
    return app


async def _engine_running(app: web.Application) -> AsyncIterator[None]:
    engine = app[ENGINE]
    await engine.start()
    yield
    await engine.close()


async def _stop_serving(app: web.Application) -> None:
    # On shutdown, not in a cleanup context: aiohttp waits for every open handler (each
    # worker's socket and each live stream is one) before it runs cleanup, so ending them
    # later would hold the stop up until its timeout.
    await app[ENGINE].stop_serving()
