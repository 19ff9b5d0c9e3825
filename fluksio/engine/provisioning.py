"""Provisioners in the engine: ``provisioners.json`` loaded at start, and the engine's side.

The provisioners layer knows nothing of tokens or SQLite; :class:`TokensAndRequests` gives
its driver those (the :class:`~fluksio.provisioners.engine_side.EngineSide` it asks for).
The dispatcher (:mod:`fluksio.engine.dispatch.dispatcher`) owns the driver.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pluggy

from fluksio.clock import Clock
from fluksio.engine.datadir import DataDir
from fluksio.engine.provision_requests import ProvisionRequestStore
from fluksio.engine.stream import EngineStream, WorkerJoined, WorkerLeft
from fluksio.engine.tokens import TokenService
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.errors import ConfigError
from fluksio.logs import get_logger
from fluksio.provisioners.base import ProfileSettings, SiteLimit
from fluksio.provisioners.config import Loaded, load_provisioners
from fluksio.provisioners.machine.requests import MachineRequest
from fluksio.provisioners.plugins import Plugins, build_plugins
from fluksio.provisioners.provisioner import Provisioner

__all__ = [
    "Configured",
    "TokensAndRequests",
    "forward_worker_hooks",
    "instantiate",
    "load_configured",
    "log_ready",
]

log = get_logger(__name__)
# A provisioned worker's token outlives no job by much: a day, as the spec says.
JOB_TOKEN_TTL_S = 24 * 3600


@dataclass
class Configured:
    plugins: Plugins
    provisioners: list[Provisioner[Any, Any]]


def load_configured(layout: DataDir, clock: Clock | None = None) -> Configured:
    """Installed plugins and the provisioners ``provisioners.json`` configures, each made
    with ``clock`` (the engine's; None: the system's) and its state directory.

    A broken plugin is logged by name and left out; a bad file raises
    :class:`~fluksio.errors.ConfigError` naming the file, provisioner, profile and field.
    """
    plugins = build_plugins()
    for failure in plugins.failures:
        log.error("plugin.broken", plugin=failure.name, error=failure.error)
    try:
        loaded = load_provisioners(layout.provisioners, plugins.provisioner_types())
    except ValueError as exc:  # two plugins claiming one type
        raise ConfigError(str(exc)) from None
    return Configured(plugins, instantiate(layout, loaded, clock))


def instantiate(
    layout: DataDir, loaded: list[Loaded], clock: Clock | None = None
) -> list[Provisioner[Any, Any]]:
    """One provisioner per configured entry, each made with the engine's clock and its
    state directory."""
    provisioners = []
    for kind, settings in loaded:
        state_dir = layout.provisioner_state(settings.name)
        if _takes_what_the_engine_gives(kind):
            provisioner = kind(settings, clock=clock, state_dir=state_dir)
        else:  # a plugin written before the engine gave these: its constructor takes settings
            log.warning("plugin.old_constructor", type=kind.type_name, takes="settings only")
            provisioner = kind(settings)
            provisioner.state_dir = state_dir
        provisioners.append(provisioner)
    return provisioners


def _takes_what_the_engine_gives(kind: type[Provisioner[Any, Any]]) -> bool:
    parameters = inspect.signature(kind).parameters.values()
    named = {p.name for p in parameters}
    return {"clock", "state_dir"} <= named or any(p.kind is p.VAR_KEYWORD for p in parameters)


class TokensAndRequests:
    """What the provisioning driver needs of the engine: tokens, and SQLite."""

    def __init__(
        self,
        tokens: TokenService,
        worker_tokens: WorkerTokenStore,
        requests: ProvisionRequestStore,
    ) -> None:
        self._tokens = tokens
        self._worker_tokens = worker_tokens
        self._requests = requests

    def mint_token(
        self, provisioner: str, profile: ProfileSettings, request_id: str
    ) -> tuple[str, str]:
        minted = self._tokens.mint_worker(
            f"{provisioner}-{profile.name}",
            tuple(profile.labels),
            created_by=f"provisioner {provisioner}",
            ttl_s=JOB_TOKEN_TTL_S,
            provisioned_by=(provisioner, profile.name, request_id),
        )
        return minted.token, minted.record.jti

    def revoke_token(self, jti: str, reason: str) -> None:
        self._worker_tokens.revoke(jti, reason)

    def remember(self, request: MachineRequest) -> None:
        self._requests.save(request)

    def forget(self, request_id: str) -> None:
        self._requests.delete(request_id)

    def remember_pause(self, profile: str, said: str | None) -> None:
        self._requests.save_pause(profile, said)

    def pauses(self) -> dict[str, str]:
        return self._requests.pauses()

    def remember_site(self, profile: str, limit: SiteLimit) -> None:
        self._requests.save_site(profile, limit)

    def site_limits(self) -> dict[str, SiteLimit]:
        return self._requests.sites()


def forward_worker_hooks(stream: EngineStream, hook: pluggy.HookRelay) -> None:
    """The plugins' event hooks, as subscribers of the engine's stream."""
    stream.subscribe(WorkerJoined, lambda e: hook.fluksio_worker_attached(worker=e.worker))
    stream.subscribe(WorkerLeft, lambda e: hook.fluksio_worker_gone(worker=e.worker))


def log_ready(configured: Configured) -> None:
    for provisioner in configured.provisioners:
        profiles = ", ".join(p.name for p in provisioner.settings.profiles)
        log.info(
            "provisioner.ready",
            provisioner=provisioner.name,
            type=provisioner.type_name,
            profiles=profiles,
        )
