"""What a client asks the engine of its provisioners: pause a profile, resume it.

A part of :class:`~fluksio.engine.front.engine.Engine`. A paused profile is asked for nothing
until it is resumed (its jobs already submitted are left alone); the answer is the
profile as ``GET /workers/resources`` shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fluksio.errors import NotFound
from fluksio.wire.answers.workers import ProfileBody

if TYPE_CHECKING:
    from fluksio.engine.dispatch.dispatcher import Dispatcher
    from fluksio.engine.views import EngineViews
    from fluksio.provisioners.driver import ProvisioningDriver

__all__ = ["ProvisioningAsked"]


class ProvisioningAsked:
    def __init__(self, *, dispatcher: Dispatcher, views: EngineViews) -> None:
        self._dispatcher = dispatcher
        self.views = views

    def pause_profile(self, provisioner: str, profile: str, *, by: str) -> ProfileBody:
        """Pause ``provisioner/profile`` until :meth:`resume_profile`; it outlasts the
        engine. ``NotFound`` for a profile not configured."""
        self._driver().pause(f"{provisioner}/{profile}", by)
        return self.views.profile(provisioner, profile)

    def resume_profile(self, provisioner: str, profile: str, *, by: str) -> ProfileBody:
        """Resume ``provisioner/profile`` (paused by a person or by itself): its failures
        in a row and its rest start from nothing, so a call waiting for it asks at once."""
        self._driver().resume(f"{provisioner}/{profile}", by)
        return self.views.profile(provisioner, profile)

    def _driver(self) -> ProvisioningDriver:
        driver = self._dispatcher.provisioning
        if driver is None:
            raise NotFound("profile: no provisioners are configured (provisioners.json)")
        return driver
