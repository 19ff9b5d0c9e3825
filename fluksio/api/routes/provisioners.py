"""Provisioners: pause a profile (nothing of it is asked for), resume it.

``POST /provisioners/{provisioner}/{profile}/pause``   -> the profile, paused (superuser)
``POST /provisioners/{provisioner}/{profile}/resume``  -> the profile, resumed (superuser)

How every profile stands is in ``GET /workers/resources``. Both are idempotent.
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.wire.answers.workers import ProfileBody

__all__ = ["routes"]

routes = Routes()


@routes.post(
    "/provisioners/{provisioner}/{profile}/pause",
    auth="superuser",
    answer=ProfileBody,
    errors=(404,),
)
async def _pause(call: Call[None]) -> ProfileBody:
    """Pause a profile: nothing is asked of it until it is resumed (its jobs stay)"""
    return call.app[ENGINE].pause_profile(*_named(call), by=call.superuser.username)


@routes.post(
    "/provisioners/{provisioner}/{profile}/resume",
    auth="superuser",
    answer=ProfileBody,
    errors=(404,),
)
async def _resume(call: Call[None]) -> ProfileBody:
    """Resume a profile, paused by a person or by itself after failures in a row"""
    return call.app[ENGINE].resume_profile(*_named(call), by=call.superuser.username)


def _named(call: Call[None]) -> tuple[str, str]:
    """The provisioner and profile the path names."""
    return call.request.match_info["provisioner"], call.request.match_info["profile"]
