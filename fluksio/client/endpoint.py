"""Where the engine's API is and what every request to it carries: shared by the blocking
and the awaited HTTP shells, and by the two clients built on them."""

from __future__ import annotations

import ssl
from typing import Generic, TypeVar

from fluksio.client.bounds import Bounds

__all__ = ["Endpoint", "Front"]


class Endpoint:
    """The API at ``base_url`` (``https://host/api/v1``), with a bearer ``token``, the CA
    an ``https`` engine's certificate is verified against (``ca_file``; default: the
    system's), and how large and slow an answer may be (``bounds``)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        ca_file: str | None = None,
        bounds: Bounds | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.bounds = bounds or Bounds()
        self.tls = ssl.create_default_context(cafile=ca_file) if ca_file else None
        """The context ``ca_file`` asks for; None: the system's."""

    def bearer(self) -> dict[str, str]:
        """The header that says who is asking, when a token is known."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


Shell = TypeVar("Shell", bound=Endpoint)


class Front(Generic[Shell]):
    """What a client holds: the HTTP shell it sends through, and how long what waits
    rides over the engine's absence (``ride_over_s``)."""

    def __init__(self, http: Shell, ride_over_s: float) -> None:
        self.http = http
        self.ride_over_s = ride_over_s

    @property
    def base_url(self) -> str:
        return self.http.base_url
