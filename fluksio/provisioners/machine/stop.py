"""The provisioning machine's inputs at an engine's start and stop: the requests an earlier
engine left, watched again; at shutdown, every request whose worker has not attached
withdrawn (written down as such first) and cancelled; and, as the engine runs, a queued
job that no waiting call would use any more withdrawn the same way, a few seconds on.

A part of :class:`~fluksio.provisioners.machine.provisioning.ProvisioningMachine`, given its
:class:`~fluksio.provisioners.machine.state.MachineState` (the state, and the steps every rule
takes).
"""

from __future__ import annotations

from collections.abc import Iterable

from fluksio.provisioners.machine.effects import Effect, Forget, Log, Remember, Revoke, Unwake, Wake
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage
from fluksio.provisioners.machine.state import MachineState, ProfileEntry

__all__ = ["NOTHING_WAITS", "SHUTTING_DOWN", "UNWANTED_GRACE_S", "WITHDRAWN", "StartAndStop"]

SHUTTING_DOWN = "the engine is shutting down"
WITHDRAWN = "withdrawn when the engine stopped"
NOTHING_WAITS = "withdrawn: no waiting call needs it any more"
UNWANTED_GRACE_S = 5.0
"""How long a queued job no waiting call would use is kept before it is withdrawn: a flow's
next node, or a run started again at once, takes it instead of queueing anew."""


class StartAndStop:
    def __init__(self, state: MachineState) -> None:
        self._state = state

    def recover(self, requests: Iterable[MachineRequest], now: float) -> list[Effect]:
        """Requests an earlier run of the engine submitted: watched again where they left.

        Each is polled, and timed out from when it was submitted; one whose worker has not
        attached is its profile's outstanding request again, so nothing is submitted twice.
        One whose submission never answered before the engine stopped is looked for.
        """
        effects: list[Effect] = []
        for request in requests:
            entry = self._state.entries.get(f"{request.provisioner}/{request.profile}")
            if entry is None:
                # Nothing configured can poll or cancel it any more; its worker must not attach.
                if request.token_jti is not None:
                    reason = "its provisioner profile is no longer configured"
                    effects.append(Revoke(request.token_jti, reason))
                profile = f"{request.provisioner}/{request.profile}"
                effects += [
                    Forget(request.id),
                    Log(
                        "warning", "provision.orphaned", {"profile": profile, "job": request.job_id}
                    ),
                ]
                continue
            entry.live[request.id] = request
            if request.job_id is None:
                request.answer_lost = "the engine stopped before the submission answered"
            if request.stage is not RequestStage.ATTACHED:
                entry.outstanding = request
                if request.withdrawn:
                    # The engine before this one stopped while cancelling it: finished
                    # here, and no failed start, however its job ended meanwhile.
                    self._state.cancel(entry, request, WITHDRAWN, effects)
                else:
                    self._state.arm_timeout(entry, request, effects)
            self._state.ensure_poll(entry.rule.provisioner, now, effects)
        effects += self._state.changed()
        return effects

    def closing(self) -> list[Effect]:
        """The engine is stopping: nothing new is asked for, polled or rested."""
        self._state.is_closing = True
        effects: list[Effect] = [Unwake(f"rest:{key}") for key in self._state.entries]
        effects += [Unwake(f"poll:{name}") for name in self._state.pollers]
        return effects

    def close(self) -> list[Effect]:
        """Cancel every request whose worker has not attached (once its submission, if
        any was under way, has answered), marked withdrawn first: a cancel the engine stops
        before it finishes is finished by the next, and counted as no failure."""
        effects: list[Effect] = []
        for entry in self._state.entries.values():
            for request in list(entry.live.values()):
                if request.stage is not RequestStage.ATTACHED:
                    self.withdraw(entry, request, effects)
        return effects

    def wanted(self, profiles: frozenset[str], now: float) -> list[Effect]:
        """After a scheduling pass: the profiles (``provisioner/profile``) some waiting call
        would use. A queued job of any other (its run cancelled, its calls placed elsewhere)
        is withdrawn :data:`UNWANTED_GRACE_S` later, unless it is wanted again by then: it
        would hold the site's queue until the provision timeout for nothing."""
        effects: list[Effect] = []
        for key, entry in self._state.entries.items():
            for request in entry.live.values():
                if request.stage is not RequestStage.QUEUED or request.withdrawn:
                    continue
                wake = f"unwanted:{request.id}"
                if key in profiles and request.id in self._state.unwanted:
                    self._state.unwanted.discard(request.id)
                    effects.append(Unwake(wake))
                elif key not in profiles and request.id not in self._state.unwanted:
                    self._state.unwanted.add(request.id)
                    effects.append(Wake(wake, now + UNWANTED_GRACE_S))
        return effects

    def unwanted_due(self, request_id: str, effects: list[Effect]) -> None:
        """Its grace is over and nothing took it: withdrawn, as at shutdown (no failure)."""
        self._state.unwanted.discard(request_id)
        found = self._state.find(request_id) if not self._state.is_closing else None
        if found is not None and found[1].stage is RequestStage.QUEUED:
            self.withdraw(*found, effects, NOTHING_WAITS)

    def withdraw(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        effects: list[Effect],
        reason: str = SHUTTING_DOWN,
    ) -> None:
        if not request.withdrawn:
            request.withdrawn = True
            effects.append(Remember(request))
        self._state.cancel(entry, request, reason, effects)
