"""Where the agent connects: the rules for ``--url`` and the artifact URL derived from it.

``ws://`` and ``http://`` are allowed only to loopback (127.0.0.0/8, ::1, localhost)
unless ``--insecure``: the worker token and node secrets travel over this connection.
Elsewhere the URL must be ``wss://`` (or ``https://``, read as ``wss://``).
"""

from __future__ import annotations

import ipaddress
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from fluksio.agent.errors import AgentError

__all__ = [
    "AttachUrl",
    "Route",
    "UrlError",
    "is_loopback",
    "parse_attach_url",
    "parse_connect_to",
    "tls_trust",
]

_SECURE = {"wss": "wss", "https": "wss"}
_PLAIN = {"ws": "ws", "http": "ws"}


class UrlError(AgentError, ValueError):
    """The URL cannot be used; the message is one sentence for the user."""


@dataclass(frozen=True)
class AttachUrl:
    websocket: str
    artifacts: str
    loopback: bool
    artifacts_given: bool = False
    """``--artifact-url`` was given: what the engine offers does not replace it."""

    def offered_artifacts(self, url: str) -> str | None:
        """The artifact URL the engine's welcome offers, if it keeps the rule of ``--url``:
        ``https://``; ``http://`` only to loopback, or where the attach URL is already
        plain off loopback (``--insecure``). None: keep the derived one."""
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            return url
        plain_already = self.websocket.startswith("ws://") and not self.loopback
        host = parts.hostname or ""
        plain_allowed = bool(host) and (is_loopback(host) or plain_already)
        return url if parts.scheme == "http" and plain_allowed else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_attach_url(url: str, *, insecure: bool, artifact_url: str | None = None) -> AttachUrl:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in _SECURE and scheme not in _PLAIN:
        raise UrlError(f"--url must start with wss:// (or ws:// to this machine), not {url!r}")
    if not host:
        raise UrlError(f"--url has no host: {url!r}")
    if not parts.path.rstrip("/").endswith("/workers/attach"):
        raise UrlError("--url must be the attach URL, ending in /api/v1/workers/attach")
    loopback = is_loopback(host)
    if scheme in _PLAIN and not loopback and not insecure:
        raise UrlError(
            f"{scheme}:// to {host} would send the worker token unencrypted; use wss://, or"
            " pass --insecure on a network you trust"
        )
    ws_scheme = _SECURE.get(scheme) or _PLAIN[scheme]
    path = parts.path.rstrip("/")
    websocket = urlunsplit((ws_scheme, parts.netloc, path, "", ""))
    http_scheme = "https" if ws_scheme == "wss" else "http"
    derived = urlunsplit(
        (http_scheme, parts.netloc, path[: -len("/workers/attach")] + "/artifacts", "", "")
    )
    return AttachUrl(
        websocket=websocket,
        artifacts=artifact_url or derived,
        loopback=loopback,
        artifacts_given=artifact_url is not None,
    )


def tls_trust(ca_file: str | None) -> ssl.SSLContext | None:
    """The client TLS context: the system's CAs (``SSL_CERT_FILE`` included) and, with
    ``ca_file``, the CAs in it too; None when nothing is added to the defaults."""
    if not ca_file:
        return None
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=ca_file)
    return context


@dataclass(frozen=True)
class Route:
    """``--connect-to``: connections to the attach URL's host and port go to ``to``
    instead. TLS still verifies the URL's own name, as curl's ``--connect-to`` does, so
    what lies between (a login node's relay) sees only ciphertext."""

    host: str
    port: int
    to_host: str
    to_port: int

    def applies(self, host: str, port: int) -> bool:
        return host == self.host and port == self.port

    def as_env(self) -> str:
        """For the call's own artifact transfers (``FLUKSIO_CONNECT_TO``)."""
        return json.dumps({"for": [self.host, self.port], "to": [self.to_host, self.to_port]})


def parse_connect_to(text: str, websocket_url: str) -> Route:
    """``HOST:PORT`` (``[v6]:PORT``) for the host and port of ``websocket_url``."""
    target = urlsplit(f"//{text.strip()}")
    try:
        to_port = target.port
    except ValueError:
        to_port = None
    if not target.hostname or to_port is None or to_port == 0:
        raise UrlError(f"--connect-to takes HOST:PORT (where to connect instead), not {text!r}")
    parts = urlsplit(websocket_url)
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    return Route(parts.hostname or "", port, target.hostname, to_port)
