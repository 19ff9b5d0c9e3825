"""The provisioning machine's site limits: what the site's own accounting allows each
profile's jobs (:meth:`~fluksio.provisioners.provisioner.Provisioner.site_limits`), read
from the provisioner's first need on, every few minutes.

A profile never has more jobs alive than its site allows, whatever its ``max_workers``;
a call waiting on that limit says so. A profile the site refuses (it asks for more time
than the QOS allows) is not asked for while the refusal stands: a later reading that no
longer refuses it frees it, with no one resuming it.

A part of :class:`~fluksio.provisioners.machine.provisioning.ProvisioningMachine`, given its
:class:`~fluksio.provisioners.machine.state.MachineState` (the state, and the steps every rule
takes).
"""

from __future__ import annotations

from collections.abc import Mapping

from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.machine.effects import Effect, Log, RememberSite
from fluksio.provisioners.machine.state import MachineState

__all__ = ["SiteLimits"]


class SiteLimits:
    def __init__(self, state: MachineState) -> None:
        self._state = state

    def site_read(self, provisioner: str, limits: Mapping[str, SiteLimit]) -> list[Effect]:
        """The site said what it allows each profile of ``provisioner`` (by profile name;
        one left out: nothing beyond its own ``max_workers``)."""
        effects = self._site_known(provisioner)
        for entry in self._state.of(provisioner):
            limit = limits.get(entry.rule.profile.name, SiteLimit())
            if limit == entry.site and entry.site_known:
                continue
            entry.site, entry.site_known = limit, True
            effects.append(RememberSite(entry.rule.key, limit))
            fields = {
                "profile": entry.rule.key,
                "most_jobs": limit.most_jobs,
                "why": limit.why_most,
                "refused": limit.refused,
            }
            effects.append(Log("info", "provision.site_limits", fields))
        return effects + (self._state.changed() if effects else [])

    def site_unread(self, provisioner: str) -> list[Effect]:
        """The site's limits could not be read (or not in time): the last reading stands,
        an earlier engine's too; never read, its profiles go on one job at a time."""
        effects = self._site_known(provisioner)
        return effects + (self._state.changed() if effects else [])

    def site_before(self, limits: Mapping[str, SiteLimit]) -> list[Effect]:
        """What an earlier engine last read of each profile's site (``provisioner/profile``
        -> its limit): kept to until the site is read again."""
        for key, limit in limits.items():
            entry = self._state.entries.get(key)
            if entry is not None:
                entry.site, entry.site_known = limit, True
        return self._state.changed() if limits else []

    def _site_known(self, provisioner: str) -> list[Effect]:
        """A reading ended: profiles that waited for it may be asked for now."""
        self._state.sites_read.add(provisioner)
        effects: list[Effect] = []
        for entry in self._state.of(provisioner):
            if entry.reading_site:
                entry.reading_site = False
                effects.append(Log("info", "provision.site_read", {"profile": entry.rule.key}))
        return effects
