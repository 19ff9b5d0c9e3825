"""Where the engine's API is and what every request to it carries: shared by the blocking
and the awaited HTTP shells, and by the two clients built on them."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Generic, TypeVar

from fluksio.client.bounds import Bounds
from fluksio.client.errors import ClientError, EngineRefused, Unreachable

__all__ = ["Endpoint", "Front"]


class Endpoint:
    """The API at ``base_url`` (``https://host/api/v1``; or several engines' in a list, the
    next asked when one is a standby or away), with a bearer ``token``, the CA
    an ``https`` engine's certificate is verified against (``ca_file``; default: the
    system's), and how large and slow an answer may be (``bounds``)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str | None = None,
        ca_file: str | None = None,
        bounds: Bounds | None = None,
    ):
        given = [base_url] if isinstance(base_url, str) else list(base_url)
        if not given:
            raise ValueError("no engine URL given")
        self.engines = [base.rstrip("/") for base in given]
        """The engines' API bases: the one asked first, then the others in turn (the
        engines of one database, one active and the others standby)."""
        self.token = token
        self.bounds = bounds or Bounds()
        self.tls = ssl.create_default_context(cafile=ca_file) if ca_file else None
        """The context ``ca_file`` asks for; None: the system's."""

    @property
    def base_url(self) -> str:
        """The engine asked now."""
        return self.engines[0]

    def switch_after(self, failed: ClientError, tried: int) -> None:
        """Ask the next engine from now on, after ``failed`` on the ``tried``-th (from 0)
        of one request: one that is a standby (503) or refused the connection did nothing
        of it. ``failed`` itself when it is no such failure or every engine was tried."""
        standby = isinstance(failed, EngineRefused) and failed.status == 503
        unsent = isinstance(failed, Unreachable) and failed.unsent
        if tried + 1 >= len(self.engines) or not (standby or unsent):
            raise failed
        self.engines.append(self.engines.pop(0))

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
