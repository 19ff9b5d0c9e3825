"""Provisioners in the engine: load ``provisioners.json``, run the driver, feed it events.

The provisioners layer knows nothing of tokens, runs or the scheduler's owner; this module
gives its driver what it needs (:class:`~fluksio.provisioners.driver.EngineSide`) and hands
the driver's answers to the run manager.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from fluksio.api import appkeys
from fluksio.api.datadir import DataDir
from fluksio.api.logging import get_logger
from fluksio.api.provision_requests import ProvisionRequestStore
from fluksio.api.runs.manager import RunManager
from fluksio.api.tokens import TokenService
from fluksio.api.worker_tokens import WorkerTokenStore
from fluksio.errors import ConfigError
from fluksio.provisioners.base import Profile, Provisioner
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.driver import ProvisioningDriver, Request
from fluksio.provisioners.plugins import Plugins, build_plugins

__all__ = ["CONFIGURED", "Configured", "load_configured", "provisioning_context"]

log = get_logger(__name__)
# A provisioned worker's token outlives no job by much: a day, as the spec says.
JOB_TOKEN_TTL_S = 24 * 3600


@dataclass
class Configured:
    plugins: Plugins
    provisioners: list[Provisioner]


CONFIGURED = web.AppKey("provisioners_configured", Configured)
"""What ``fluksio serve`` already loaded (to refuse a bad file before listening)."""


def load_configured(layout: DataDir) -> Configured:
    """Installed plugins and the provisioners ``provisioners.json`` configures.

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
    return Configured(plugins, [kind(settings) for kind, settings in loaded])


class _EngineSide:
    def __init__(
        self,
        tokens: TokenService,
        worker_tokens: WorkerTokenStore,
        requests: ProvisionRequestStore,
        manager: RunManager,
    ) -> None:
        self._tokens = tokens
        self._worker_tokens = worker_tokens
        self._requests = requests
        self._manager = manager
        self.driver: ProvisioningDriver | None = None

    def mint_token(self, provisioner: str, profile: Profile, request_id: str) -> tuple[str, str]:
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

    def remember(self, request: Request) -> None:
        self._requests.save(request)

    def forget(self, request_id: str) -> None:
        self._requests.delete(request_id)

    def changed(self) -> None:
        if self.driver is not None:
            self._manager.scheduler.set_profiles(self.driver.scheduler_profiles())
            self._manager.replan()


async def provisioning_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the driver runs while the engine does; pending jobs die with it."""
    configured = app.get(CONFIGURED) or load_configured(app[appkeys.DATA_DIR])
    manager = app[appkeys.RUN_MANAGER]
    requests = ProvisionRequestStore(app[appkeys.DATABASE])
    engine = _EngineSide(app[appkeys.TOKENS], app[appkeys.WORKER_TOKENS], requests, manager)
    driver = ProvisioningDriver(configured.plugins.manager, configured.provisioners, engine)
    engine.driver = driver
    driver.recover(requests.load())
    app[appkeys.PROVISIONING] = driver
    manager.provisioning = driver
    for provisioner in configured.provisioners:
        profiles = ", ".join(p.name for p in provisioner.settings.profiles)
        log.info(
            "provisioner.ready",
            provisioner=provisioner.name,
            type=provisioner.type_name,
            profiles=profiles,
        )
    engine.changed()
    yield
    manager.provisioning = None
    await driver.close()
