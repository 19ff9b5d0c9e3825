"""What the provisioning driver needs of the engine it runs in: worker tokens, and somewhere
durable to write its requests and its profiles paused by hand. The engine's
:class:`~fluksio.engine.provisioning.TokensAndRequests` is one; tests record instead."""

from __future__ import annotations

from typing import Protocol

from fluksio.provisioners.base import ProfileSettings, SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest

__all__ = ["EngineSide"]


class EngineSide(Protocol):
    """What the driver needs from the engine: tokens, and somewhere durable to write."""

    def mint_token(
        self, provisioner: str, profile: ProfileSettings, request_id: str
    ) -> tuple[str, str]:
        """A worker token for one request (24 h, the profile's labels): (token, jti)."""
        ...

    def revoke_token(self, jti: str, reason: str) -> None: ...

    def remember(self, request: MachineRequest) -> None:
        """Keep a submitted request (and its stage) where a restarted engine finds it."""
        ...

    def forget(self, request_id: str) -> None: ...

    def remember_pause(self, profile: str, said: str | None) -> None:
        """Keep that a person paused ``profile`` (``said``: why), or (None) resumed it."""
        ...

    def pauses(self) -> dict[str, str]:
        """The profiles paused by hand, as :meth:`remember_pause` kept them."""
        ...

    def remember_site(self, profile: str, limit: SiteLimit) -> None:
        """Keep what ``profile``'s site allowed at its last reading."""
        ...

    def site_limits(self) -> dict[str, SiteLimit]:
        """Each profile's last reading, as :meth:`remember_site` kept them."""
        ...
