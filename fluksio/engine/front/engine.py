"""The engine as one object: built from its settings, started, closed; no HTTP needed.

``Engine(settings)`` holds what exists before it starts (the settings, the clock, the
stream, the registry of workers, the live feed's buffer, the metrics); ``await
engine.start()`` opens the rest (the database and its stores, the key ring, the launcher,
the dispatcher with the provisioners, the watch over workers, the pruning of old runs);
``await engine.close()`` closes what start opened, in reverse. A test, a benchmark or an
embedding program runs one in its own process; the HTTP app (``fluksio.api.app``) is a
face around one, kept under a single app key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from aiohttp import WSCloseCode, web

from fluksio.agent.launcher import Launcher
from fluksio.clock import Clock, SystemClock
from fluksio.engine.artifacts import ArtifactStore
from fluksio.engine.call_saves import CallSaves
from fluksio.engine.database import Database
from fluksio.engine.datadir import DataDir
from fluksio.engine.dispatch.dispatcher import Dispatcher
from fluksio.engine.feed import LiveFeed
from fluksio.engine.front.artifacts import ArtifactsAsked
from fluksio.engine.front.callers import CallersAsked
from fluksio.engine.front.logs import LogsAsked
from fluksio.engine.front.provisioning import ProvisioningAsked
from fluksio.engine.front.runs import RunsAsked
from fluksio.engine.front.tokens import TokensAsked
from fluksio.engine.keys import KeyRing
from fluksio.engine.live import LiveEvents
from fluksio.engine.metrics import EngineMetrics
from fluksio.engine.personal_tokens import PersonalTokenStore
from fluksio.engine.postgres.fence import Fence
from fluksio.engine.provision_requests import ProvisionRequestStore
from fluksio.engine.provisioning import (
    Configured,
    TokensAndRequests,
    forward_worker_hooks,
    load_configured,
    log_ready,
)
from fluksio.engine.runs.items import ArrayItems, ItemSource, ItemStore
from fluksio.engine.runs.local import LocalExecutor, engine_place
from fluksio.engine.runs.store import FlowStore, RunStore
from fluksio.engine.scrape_tokens import ScrapeTokenStore
from fluksio.engine.secrets import SecretStore
from fluksio.engine.settings import EngineSettings
from fluksio.engine.state import open_state
from fluksio.engine.stream import EngineStream
from fluksio.engine.tokens import TokenService, WorkerIdentity
from fluksio.engine.users import UserStore
from fluksio.engine.views import EngineViews
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.engine.workers.connections import ConnectionParts, WorkerConnections
from fluksio.engine.workers.reading import FrameJudge, read_worker
from fluksio.engine.workers.registry import WorkerRegistry
from fluksio.engine.workers.socket import CountedSocket
from fluksio.engine.workers.watch import watch_workers
from fluksio.logs import LogSecrets, get_logger

__all__ = ["Engine"]

log = get_logger(__name__)


class Engine:
    """One engine: its state, its core and its background work, behind ``start``/``close``.

    The stores and the dispatcher exist once ``start`` has run; reading one before is an
    ``AttributeError`` naming it.
    """

    settings: EngineSettings
    layout: DataDir
    stream: EngineStream
    """The engine's one stream of typed events (``fluksio.engine.stream``)."""
    workers: WorkerRegistry
    feed: LiveFeed
    """The live feed's buffer, which ``GET /events`` streams."""
    metrics: EngineMetrics
    views: EngineViews
    """What the HTTP layer reads: workers with their places, the queue, the profiles."""

    # Its own: a client asks the engine (its parts' methods, as its own), never these.
    _clock: Clock
    """The engine's one clock (``fluksio.clock``): every reading of time, every timer;
    tests give one they advance."""
    _database: Database
    _users: UserStore
    _worker_tokens: WorkerTokenStore
    _scrape_tokens: ScrapeTokenStore
    _personal_tokens: PersonalTokenStore
    _tokens: TokenService
    _flows: FlowStore
    _runs: RunStore
    _secrets: SecretStore
    _artifacts: ArtifactStore
    _call_saves: CallSaves
    _dispatcher: Dispatcher
    """The core's shell: runs, places, waiting calls, provisioning."""
    _connections: WorkerConnections
    """Who is let in over the attach socket, and what the engine does as workers come
    and go."""

    def __init__(
        self,
        settings: EngineSettings,
        *,
        provisioners: Configured | None = None,
        clock: Clock | None = None,
        address: tuple[str, int] | None = None,
        log_secrets: LogSecrets | None = None,
        fence: Fence | None = None,
    ) -> None:
        """``provisioners`` as already loaded (``fluksio serve`` refuses a bad file before
        it listens), else read from the data directory at start; ``address`` is where the
        engine listens as its own machine reaches it, for provisioners that carry their
        workers' connections (None: it serves no socket); ``log_secrets``: values this
        engine knows are secret, blanked in every log line while it lives; ``fence``:
        the lease every write checks, on the active engine of several."""
        self.settings = settings
        # Held while the engine lives: the values are blanked for as long as it does.
        self._log_secrets = log_secrets or LogSecrets()
        self._clock = clock or SystemClock()
        self.layout = settings.layout
        self.stream = EngineStream()
        self.workers = WorkerRegistry(self.stream)
        self.feed = LiveFeed(settings.event_buffer, settings.event_buffer_bytes, self._clock)
        self.metrics = EngineMetrics()
        self._configured = provisioners
        self._address = address
        self._fence = fence
        self._opened = contextlib.AsyncExitStack()

    async def start(self) -> None:
        """Open the state, start the core, resume unfinished runs and machine requests."""
        try:
            await self._opened.enter_async_context(self._state())
            await self._opened.enter_async_context(self._core())
            self._run_in_background(self._watch_workers)
            if self.settings.keep_runs_s:
                keep_s, every_s = self.settings.keep_runs_s, self.settings.prune_every_s
                self._dispatcher.keep_runs_for(keep_s, every_s, self._artifacts)
        except BaseException:
            await self._opened.aclose()
            raise

    async def stop_serving(self) -> None:
        """End the live feed's streams and tell every attached worker the engine is going.

        Before ``close`` when served: an open stream or worker socket is a handler the
        server waits for before it lets the engine close.
        """
        self.feed.close()
        # Before the sockets close: a call they end is the next start's to recover (run
        # again where its node says ``retry_on_restart``), not a failure to record now.
        self._dispatcher.stopping()
        for session in self.workers.sessions():
            await session.close("the engine is shutting down", code=WSCloseCode.GOING_AWAY)

    def monotonic(self) -> float:
        """A reading of the engine's one clock, for intervals (a request's duration, a
        throttle's window): the front door's time is the engine's, which tests advance."""
        return self._clock.monotonic()

    def frame_judge(self) -> FrameJudge:
        """For a worker's socket about to open: which of its large frames are read whole
        (the front door puts it before the socket's reader)."""
        return FrameJudge(self.workers.frames)

    async def serve_worker(
        self, token: WorkerIdentity, socket: web.WebSocketResponse, judge: FrameJudge
    ) -> None:
        """Read a worker's opened socket from its hello until it closes (``token``
        verified, ``judge`` the socket's :meth:`frame_judge`)."""
        counted = CountedSocket(socket, self.workers.frames)
        await read_worker(
            counted,
            token,
            judge,
            connections=self._connections,
            settings=self.settings,
            clock=self._clock,
        )

    async def close(self) -> None:
        """Stop the background work, cancel pending machine requests, stop what executes
        (for the next start to recover) and close the database."""
        await self._opened.aclose()

    @contextlib.asynccontextmanager
    async def _state(self) -> AsyncIterator[None]:
        layout = self.layout.ensure()
        state = open_state(self.settings, layout, self._clock, self._fence)
        database = state.database
        clock = self._clock
        self._database = database
        self._users = UserStore(database, clock)
        self._worker_tokens = WorkerTokenStore(database, clock)
        self._scrape_tokens = ScrapeTokenStore(database, clock)
        self._personal_tokens = PersonalTokenStore(database, clock)
        keys = KeyRing(state.keys)
        keys.current()  # created on first start, so a fresh data dir is complete at once
        self._tokens = TokenService(
            keys,
            self._users,
            self._worker_tokens,
            personal_tokens=self._personal_tokens,
            access_ttl_s=self.settings.access_token_ttl_s,
            clock=clock,
        )
        self._flows = FlowStore(database, clock)
        self._runs = RunStore(database)
        self._secrets = SecretStore(database, state.keys, clock)
        self._artifacts = ArtifactStore(self.settings.artifacts_dir or layout.artifacts)
        self._call_saves = CallSaves(database, clock)
        try:
            yield
        finally:
            database.close()

    @contextlib.asynccontextmanager
    async def _core(self) -> AsyncIterator[None]:
        """The dispatcher, with the engine's executor and the provisioners.

        At close, pending machine requests are cancelled, then what executes is stopped.
        """
        settings = self.settings
        launcher = Launcher(settings.node_python, mode=settings.runner_mode, clock=self._clock)
        await launcher.start()
        log.info(
            "runner.ready",
            mode=launcher.mode,
            python=launcher.python,
            version=".".join(map(str, launcher.version)),
        )
        configured = self._configured or load_configured(self.layout, self._clock)
        requests = ProvisionRequestStore(self._database)
        self._dispatcher = Dispatcher(
            engine=engine_place(settings.engine_slots),
            engine_executor=LocalExecutor(launcher, self._artifacts.root),
            runs=self._runs,
            flows=self._flows,
            secrets=self._secrets,
            stream=self.stream,
            provisioners=configured.provisioners,
            engine_side=TokensAndRequests(self._tokens, self._worker_tokens, requests),
            clock=self._clock,
            walltime_margin_s=settings.walltime_margin_s,
            engine_address=self._address,
            items=ArrayItems(
                ItemSource(self._artifacts.path_of, settings.max_item_bytes),
                ItemStore(self._database),
            ),
            worker_return_s=settings.worker_return_s,
            crash_limit=settings.crash_limit,
        )
        self._connections = WorkerConnections(
            ConnectionParts(
                settings=settings,
                clock=self._clock,
                workers=self.workers,
                dispatcher=self._dispatcher,
                tokens=self._tokens,
                artifacts=self._artifacts,
                saves=self._call_saves,
            )
        )
        self.views = EngineViews(self.workers, self._dispatcher, self._clock)
        # The stream's subscribers here: the metrics, the live feed and the plugins' hooks.
        self.metrics.watch(self.stream, self.workers, self._dispatcher, self.feed)
        live = LiveEvents(self.feed, self.views, self._clock)
        live.connect(self.stream)
        forward_worker_hooks(self.stream, configured.plugins.manager.hook)
        log_ready(configured)
        self._answer()
        self._dispatcher.recover(requests.load())
        try:
            yield
        finally:
            live.close()
            await self._dispatcher.close()
            await launcher.close()

    def _answer(self) -> None:
        """What a client asks of the engine, answered by its parts (``front/``), each given
        what it uses; their methods are the engine's own."""
        runs = RunsAsked(
            dispatcher=self._dispatcher, flows=self._flows, runs=self._runs, settings=self.settings
        )
        self.flow_list, self.flow, self.put_flow = runs.flow_list, runs.flow, runs.put_flow
        self.delete_flow, self.start_run, self.run_list = (
            runs.delete_flow, runs.start_run, runs.run_list,
        )  # fmt: skip
        self.run, self.cancel_run, self.retry_run = runs.run, runs.cancel_run, runs.retry_run
        self.delete_run, self.cancel_items, self.items_page = (
            runs.delete_run, runs.cancel_items, runs.items_page,
        )  # fmt: skip
        self.logs = LogsAsked(dispatcher=self._dispatcher, clock=self._clock).logs
        tokens = TokensAsked(
            clock=self._clock,
            stream=self.stream,
            tokens=self._tokens,
            worker_tokens=self._worker_tokens,
            personal_tokens=self._personal_tokens,
            scrape_tokens=self._scrape_tokens,
            secrets=self._secrets,
            workers=self.workers,
        )
        self.mint_worker_token, self.worker_token_list, self.revoke_worker_token = (
            tokens.mint_worker_token, tokens.worker_token_list, tokens.revoke_worker_token,
        )  # fmt: skip
        self.mint_personal_token, self.personal_token_list, self.revoke_personal_token = (
            tokens.mint_personal_token, tokens.personal_token_list,
            tokens.revoke_personal_token,
        )  # fmt: skip
        self.mint_scrape_token, self.scrape_token_list, self.revoke_scrape_token = (
            tokens.mint_scrape_token, tokens.scrape_token_list, tokens.revoke_scrape_token,
        )  # fmt: skip
        self.put_secret, self.secret_list, self.delete_secret = (
            tokens.put_secret, tokens.secret_list, tokens.delete_secret,
        )  # fmt: skip
        artifacts = ArtifactsAsked(
            settings=self.settings,
            stream=self.stream,
            artifacts=self._artifacts,
            call_saves=self._call_saves,
            dispatcher=self._dispatcher,
        )
        self.put_artifact, self.artifact, self.artifact_sent = (
            artifacts.put_artifact, artifacts.artifact, artifacts.artifact_sent,
        )  # fmt: skip
        profiles = ProvisioningAsked(dispatcher=self._dispatcher, views=self.views)
        self.pause_profile, self.resume_profile = profiles.pause_profile, profiles.resume_profile
        callers = CallersAsked(
            tokens=self._tokens, users=self._users, scrape_tokens=self._scrape_tokens
        )
        self.caller, self.known_token, self.log_in = (
            callers.caller, callers.known_token, callers.log_in,
        )  # fmt: skip

    def _run_in_background(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.get_running_loop().create_task(work())

        async def stop() -> None:
            # Awaited once cancelled: it has ended, and an error it met is raised here,
            # not lost in a "never retrieved" warning.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        self._opened.push_async_callback(stop)

    async def _watch_workers(self) -> None:
        """Silent workers gone, revoked ones cut off, drained ones closed."""
        await watch_workers(
            self.workers,
            self._tokens,
            self._worker_tokens,
            self.settings,
            self._dispatcher,
            clock=self._clock,
        )
