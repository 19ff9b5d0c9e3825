"""What the HTTP app shares between handlers, under one typed key each: the engine, and
the HTTP layer's own throttles."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.throttle import LoginGuard, LoginThrottle
from fluksio.engine.front.engine import Engine

__all__ = ["CREDENTIAL_THROTTLE", "ENGINE", "LOGIN_GUARD"]

ENGINE = web.AppKey("engine", Engine)
"""The engine (``fluksio.engine.front.engine``): routes ask it (its methods of ``front/``) and read
its views and feed; its stores, dispatcher and clock are its own."""
LOGIN_GUARD = web.AppKey("login_guard", LoginGuard)
CREDENTIAL_THROTTLE = web.AppKey("credential_throttle", LoginThrottle)
"""Refused bearer tokens by client address, on every endpoint that takes one."""
