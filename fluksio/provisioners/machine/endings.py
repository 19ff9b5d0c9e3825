"""How a provisioning request ends: with its worker attached or its job gone; failed, and
the profile rests (its backoff) before it is asked for again; or waiting for a person to
log in. A part of :class:`~fluksio.provisioners.machine.provisioning.ProvisioningMachine`,
given its :class:`~fluksio.provisioners.machine.state.MachineState` and its pauses (a
failure counts toward a pause)."""

from __future__ import annotations

from fluksio.provisioners.base import JobStatus
from fluksio.provisioners.machine.effects import (
    CleanUp,
    Effect,
    Forget,
    Log,
    Observe,
    Revoke,
    Unwake,
    Wake,
)
from fluksio.provisioners.machine.pause import Pausing
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage, login_sentence
from fluksio.provisioners.machine.state import MachineState, ProfileEntry

__all__ = ["Endings"]


class Endings:
    def __init__(self, state: MachineState, pausing: Pausing) -> None:
        self._state = state
        self._pausing = pausing

    def failed(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        message: str,
        now: float,
        effects: list[Effect],
        *,
        counted: bool = True,
    ) -> None:
        """A request that did not bring a worker: record why, rest, then ask again (unless
        that made the profile pause itself: ``counted`` toward its failures in a row)."""
        self.ended(entry, request, message, effects)
        if counted:
            self._pausing.count_failure(entry, request, message, effects)
        rule = entry.rule
        effects.append(Observe("failed", rule.provisioner, rule.profile.name))
        entry.last_error = (now, message)
        entry.failures += 1
        settings = rule.settings
        rest = min(settings.retry_max_s, settings.retry_base_s * 2 ** (entry.failures - 1))
        fields = {"profile": rule.key, "error": message, "retry_in_s": rest}
        effects.append(Log("warning", "provision.failed", fields))
        self.rest(entry, rest, now, effects)

    def wait_for_login(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        detail: str,
        now: float,
        effects: list[Effect],
    ) -> None:
        """Nothing was sent: a person must log in. Not a failure (no backoff grows); the
        profile is looked at again after one poll interval, locally, until they have."""
        if entry.login_needed is None:
            fields = {"profile": entry.rule.key, "detail": detail}
            effects.append(Log("warning", "provision.login_needed", fields))
        entry.login_needed = login_sentence(entry.rule.provisioner)
        if request.token_jti is not None:
            self.ended(entry, request, entry.login_needed, effects)  # its token is revoked
        else:  # minted nothing, wrote nothing, reached nothing: no trace to leave
            entry.live.pop(request.id, None)
            if entry.outstanding is request:
                entry.outstanding = None
            request.stage = RequestStage.ENDED
        self.rest(entry, entry.rule.settings.poll_interval_s, now, effects)

    def rest(self, entry: ProfileEntry, seconds: float, now: float, effects: list[Effect]) -> None:
        """The profile is not asked for again for ``seconds``; then the next pass may."""
        entry.resting_until = now + seconds
        if not self._state.is_closing:
            effects.append(Wake(f"rest:{entry.rule.key}", entry.resting_until))
        effects += self._state.changed()

    def ended(
        self, entry: ProfileEntry, request: MachineRequest, outcome: str, effects: list[Effect]
    ) -> None:
        if request.stage is RequestStage.ENDED:
            return
        request.stage = RequestStage.ENDED
        effects.append(Unwake(f"timeout:{request.id}"))
        entry.live.pop(request.id, None)
        if entry.outstanding is request:
            entry.outstanding = None
        if request.token_jti is not None:
            effects.append(Revoke(request.token_jti, outcome))
        fields = {
            "profile": entry.rule.key,
            "request": request.id,
            "job": request.job_id,
            "outcome": outcome,
        }
        effects += [
            Forget(request.id),
            Log("info", "provision.ended", fields),
            *self._state.changed(),
        ]

    def job_ended(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        status: JobStatus | None,
        now: float,
        effects: list[Effect],
    ) -> None:
        how = f"ended {status.describe()}" if status is not None else "left the queue"
        what = f"{entry.rule.job_noun} {request.job_id} {how}"
        if request.stage is RequestStage.ATTACHED:
            self.ended(entry, request, what, effects)
        elif request.withdrawn:
            self.ended(entry, request, f"{what}, withdrawn as the engine stopped", effects)
            effects.append(CleanUp(entry.rule.provisioner, request.id, request.job_id))
        else:
            self.failed(entry, request, f"{what} before its worker attached", now, effects)
            # Ended before its worker read what the submission left for it (a token file).
            effects.append(CleanUp(entry.rule.provisioner, request.id, request.job_id))
