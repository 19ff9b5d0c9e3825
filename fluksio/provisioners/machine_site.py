"""The provisioning machine's site limits: what the site's own accounting allows each
profile's jobs (:meth:`~fluksio.provisioners.provisioner.Provisioner.site_limits`), read
from the provisioner's first need on, every few minutes.

A profile never has more jobs alive than its site allows, whatever its ``max_workers``;
a call waiting on that limit says so. A profile the site refuses (it asks for more time
than the QOS allows) is not asked for while the refusal stands: a later reading that no
longer refuses it frees it, with no one resuming it.

A mixin of :class:`~fluksio.provisioners.machine.ProvisioningMachine`, on the state
:class:`~fluksio.provisioners.machine_state.MachineState` holds.
"""

from __future__ import annotations

from collections.abc import Mapping

from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.effects import Effect, Log
from fluksio.provisioners.machine_state import MachineState

__all__ = ["SiteLimits"]


class SiteLimits(MachineState):
    def site_read(self, provisioner: str, limits: Mapping[str, SiteLimit]) -> list[Effect]:
        """The site said what it allows each profile of ``provisioner`` (by profile name;
        one left out: nothing beyond its own ``max_workers``)."""
        effects: list[Effect] = []
        for entry in self._of(provisioner):
            limit = limits.get(entry.rule.profile.name, SiteLimit())
            if limit == entry.site:
                continue
            entry.site = limit
            fields = {
                "profile": entry.rule.key,
                "most_jobs": limit.most_jobs,
                "why": limit.why_most,
                "refused": limit.refused,
            }
            effects.append(Log("info", "provision.site_limits", fields))
        return effects + (self._changed() if effects else [])
