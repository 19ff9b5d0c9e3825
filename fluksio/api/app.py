"""The engine's app factory: ``create_app(settings)`` wires the small modules together.

State (the database, the key ring, the stores) is opened in a cleanup context, so a test
can build as many engines as it likes and each closes what it opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import WSCloseCode, web

from fluksio.agent.launcher import Launcher
from fluksio.api import appkeys
from fluksio.api.live import LiveEvents
from fluksio.api.middlewares import (
    credential_throttle_middleware,
    error_middleware,
    request_context_middleware,
)
from fluksio.api.proxies import forwarded_middleware, parse_trusted_proxies
from fluksio.api.routes import add_routes
from fluksio.api.throttle import LoginGuard, LoginThrottle
from fluksio.clock import Clock, SystemClock
from fluksio.engine.artifacts import ArtifactStore
from fluksio.engine.db import open_database
from fluksio.engine.dispatch import Dispatcher
from fluksio.engine.engine_events import EngineEvents
from fluksio.engine.events import EventFeed
from fluksio.engine.keys import KeyRing
from fluksio.engine.logging import get_logger
from fluksio.engine.metrics import EngineMetrics
from fluksio.engine.provision_requests import ProvisionRequestStore
from fluksio.engine.provisioning import (
    CONFIGURED,
    Configured,
    TokensAndRequests,
    forward_worker_events,
    load_configured,
    log_ready,
)
from fluksio.engine.runs.local import LocalExecutor, engine_place
from fluksio.engine.runs.retention import keep_pruning
from fluksio.engine.runs.store import FlowStore, RunStore
from fluksio.engine.scrape_tokens import ScrapeTokenStore
from fluksio.engine.secrets import SecretStore
from fluksio.engine.settings import EngineSettings
from fluksio.engine.tokens import TokenService
from fluksio.engine.users import UserStore
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.engine.workers.registry import WorkerRegistry
from fluksio.engine.workers.watch import watch_workers

__all__ = ["create_app"]

log = get_logger(__name__)


def create_app(
    settings: EngineSettings,
    *,
    provisioners: Configured | None = None,
    clock: Clock | None = None,
) -> web.Application:
    """The engine; ``provisioners`` as already loaded, else read from the data dir at start.

    ``clock`` is the engine's one clock (every reading of time, every timer); tests pass
    one they advance.
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
    app[appkeys.SETTINGS] = settings
    if provisioners is not None:
        app[CONFIGURED] = provisioners
    clock = clock or SystemClock()
    app[appkeys.CLOCK] = clock
    events = EngineEvents()
    app[appkeys.ENGINE_EVENTS] = events
    app[appkeys.WORKERS] = WorkerRegistry(events)
    app[appkeys.EVENTS] = EventFeed(settings.event_buffer, settings.event_buffer_bytes, clock)
    app[appkeys.METRICS] = EngineMetrics()
    app[appkeys.DATA_DIR] = settings.layout
    app[appkeys.LOGIN_GUARD] = LoginGuard(
        free_failures=settings.login_free_failures,
        base_delay_s=settings.login_base_delay_s,
        max_delay_s=settings.login_max_delay_s,
    )
    # An address may host many clients (a NAT, a cluster's login node), as for logins.
    app[appkeys.CREDENTIAL_THROTTLE] = LoginThrottle(
        free_failures=settings.login_free_failures * 4,
        base_delay_s=settings.login_base_delay_s,
        max_delay_s=settings.login_max_delay_s,
    )
    app.cleanup_ctx.append(_state)
    app.cleanup_ctx.append(_dispatch)
    app.cleanup_ctx.append(_workers)
    app.cleanup_ctx.append(_retention)
    app.on_shutdown.append(_end_event_streams)
    app.on_shutdown.append(_tell_workers_it_is_going)
    add_routes(app)
    return app


async def _state(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    layout = app[appkeys.DATA_DIR].ensure()
    database = open_database(layout.database)
    clock = app[appkeys.CLOCK]
    users = UserStore(database, clock)
    worker_tokens = WorkerTokenStore(database, clock)
    app[appkeys.DATABASE] = database
    app[appkeys.USERS] = users
    app[appkeys.WORKER_TOKENS] = worker_tokens
    app[appkeys.SCRAPE_TOKENS] = ScrapeTokenStore(database, clock)
    keys = KeyRing(layout)
    keys.current()  # created on first start, so a fresh data dir is complete at once
    app[appkeys.TOKENS] = TokenService(
        keys, users, worker_tokens, access_ttl_s=settings.access_token_ttl_s, clock=clock
    )
    app[appkeys.FLOWS] = FlowStore(database, clock)
    app[appkeys.RUNS] = RunStore(database)
    app[appkeys.SECRETS] = SecretStore(database, layout, clock)
    app[appkeys.ARTIFACTS] = ArtifactStore(layout.artifacts)
    yield
    database.close()


async def _dispatch(app: web.Application) -> AsyncIterator[None]:
    """The scheduling loop's owner, with the engine's executor and the provisioners.

    Unfinished runs and submitted machine requests resume; at shutdown pending machine
    requests are cancelled, then what executes is stopped for the next start to recover.
    """
    settings = app[appkeys.SETTINGS]
    events = app[appkeys.ENGINE_EVENTS]
    launcher = Launcher(settings.node_python, mode=settings.runner_mode)
    await launcher.start()
    log.info(
        "runner.ready",
        mode=launcher.mode,
        python=launcher.python,
        version=".".join(map(str, launcher.version)),
    )
    layout = app[appkeys.DATA_DIR]
    configured = app.get(CONFIGURED) or load_configured(layout)
    requests = ProvisionRequestStore(app[appkeys.DATABASE])
    dispatcher = Dispatcher(
        engine=engine_place(settings.engine_slots),
        engine_executor=LocalExecutor(launcher, layout.artifacts),
        runs=app[appkeys.RUNS],
        flows=app[appkeys.FLOWS],
        secrets=app[appkeys.SECRETS],
        events=events,
        provisioners=configured.provisioners,
        engine_side=TokensAndRequests(app[appkeys.TOKENS], app[appkeys.WORKER_TOKENS], requests),
        clock=app[appkeys.CLOCK],
        walltime_margin_s=settings.walltime_margin_s,
    )
    app[appkeys.DISPATCHER] = dispatcher
    # The stream's subscribers: the metrics, the plugins' hooks, the live feed.
    app[appkeys.METRICS].watch(events, app[appkeys.WORKERS], dispatcher, app[appkeys.EVENTS])
    forward_worker_events(events, configured.plugins.manager.hook)
    live = LiveEvents(app[appkeys.EVENTS], app[appkeys.WORKERS], dispatcher, app[appkeys.CLOCK])
    live.connect(events)
    log_ready(configured)
    dispatcher.recover(requests.load())
    yield
    live.close()
    await dispatcher.close()
    await launcher.close()


async def _workers(app: web.Application) -> AsyncIterator[None]:
    """Attached workers: watched while the engine runs, told it is going when it stops."""
    registry = app[appkeys.WORKERS]
    watcher = asyncio.get_running_loop().create_task(
        watch_workers(
            registry,
            app[appkeys.TOKENS],
            app[appkeys.WORKER_TOKENS],
            app[appkeys.SETTINGS],
            app[appkeys.DISPATCHER],
            clock=app[appkeys.CLOCK],
        )
    )
    yield
    # Awaited once cancelled (aiohttp's pattern for background tasks): it has ended, and
    # an error it met is raised here, not lost in a "never retrieved" warning.
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


async def _retention(app: web.Application) -> AsyncIterator[None]:
    """Ended runs past the retention age deleted in the background (none with 0)."""
    settings = app[appkeys.SETTINGS]
    if not settings.keep_runs_s:
        yield
        return
    pruner = asyncio.get_running_loop().create_task(
        keep_pruning(
            app[appkeys.RUNS],
            app[appkeys.ARTIFACTS],
            app[appkeys.DISPATCHER],
            keep_s=settings.keep_runs_s,
            every_s=settings.prune_every_s,
            clock=app[appkeys.CLOCK],
        )
    )
    yield
    pruner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pruner


async def _end_event_streams(app: web.Application) -> None:
    # Like the workers' sockets: an open stream is a handler aiohttp would wait for.
    app[appkeys.EVENTS].close()


async def _tell_workers_it_is_going(app: web.Application) -> None:
    # On shutdown, not in a cleanup context: aiohttp waits for every open handler (each
    # worker's socket is one) before it runs cleanup, so closing them later would hold
    # the stop up until its timeout.
    for session in app[appkeys.WORKERS].sessions():
        await session.close("the engine is shutting down", code=WSCloseCode.GOING_AWAY)
