"""Every object the engine shares between handlers, under one typed key each."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.throttle import LoginGuard, LoginThrottle
from fluksio.clock import Clock
from fluksio.engine.artifacts import ArtifactStore
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import Database
from fluksio.engine.dispatch import Dispatcher
from fluksio.engine.engine_events import EngineEvents
from fluksio.engine.events import EventFeed
from fluksio.engine.metrics import EngineMetrics
from fluksio.engine.runs.store import FlowStore, RunStore
from fluksio.engine.scrape_tokens import ScrapeTokenStore
from fluksio.engine.secrets import SecretStore
from fluksio.engine.settings import EngineSettings
from fluksio.engine.tokens import TokenService
from fluksio.engine.users import UserStore
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.engine.workers.registry import WorkerRegistry

__all__ = [
    "ARTIFACTS",
    "CLOCK",
    "CREDENTIAL_THROTTLE",
    "DATABASE",
    "DATA_DIR",
    "DISPATCHER",
    "ENGINE_EVENTS",
    "EVENTS",
    "FLOWS",
    "LOGIN_GUARD",
    "METRICS",
    "RUNS",
    "SCRAPE_TOKENS",
    "SECRETS",
    "SETTINGS",
    "TOKENS",
    "USERS",
    "WORKERS",
    "WORKER_TOKENS",
]

SETTINGS = web.AppKey("settings", EngineSettings)
DATA_DIR = web.AppKey("data_dir", DataDir)
DATABASE = web.AppKey("database", Database)
USERS = web.AppKey("users", UserStore)
WORKER_TOKENS = web.AppKey("worker_tokens", WorkerTokenStore)
TOKENS = web.AppKey("tokens", TokenService)
LOGIN_GUARD = web.AppKey("login_guard", LoginGuard)
CREDENTIAL_THROTTLE = web.AppKey("credential_throttle", LoginThrottle)
"""Refused bearer tokens by client address, on every endpoint that takes one."""
FLOWS = web.AppKey("flows", FlowStore)
RUNS = web.AppKey("runs", RunStore)
SECRETS = web.AppKey("secrets", SecretStore)
DISPATCHER = web.AppKey("dispatcher", Dispatcher)
"""The core's shell: runs, places, waiting calls, provisioning."""
WORKERS = web.AppKey("workers", WorkerRegistry)
ENGINE_EVENTS = web.AppKey("engine_events", EngineEvents)
"""The engine's one stream of typed events (``fluksio.engine.engine_events``)."""
EVENTS = web.AppKey("events", EventFeed)
"""The live feed ``GET /events`` streams (``fluksio.api.live`` says what goes in)."""
METRICS = web.AppKey("metrics", EngineMetrics)
SCRAPE_TOKENS = web.AppKey("scrape_tokens", ScrapeTokenStore)
ARTIFACTS = web.AppKey("artifacts", ArtifactStore)
CLOCK: web.AppKey[Clock] = web.AppKey("clock")
"""The engine's one clock (``fluksio.clock``): every reading of time and every timer;
tests give ``create_app`` one they advance."""
