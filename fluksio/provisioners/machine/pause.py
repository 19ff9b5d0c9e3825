"""The provisioning machine's pauses: a profile that keeps failing stops asking the site,
and a person may stop (and resume) any profile.

A request that ends without a job counts as a failed submission (the site refused it: a
wrong partition, an account out of hours); one whose job ended or timed out before its
worker attached counts as a failed start. Each count runs in a row: a job taken ends the
first, a worker attached the second. At ``pause_after_failed_submissions`` or
``pause_after_failed_starts`` the profile pauses itself: nothing of it is asked for, and a
call that only it could serve says why, until ``fluksio provisioners resume``. A pause by
hand (``fluksio provisioners pause``, before a maintenance) is written down and outlasts
the engine; one the profile took itself does not, since the usual mend (a corrected
``provisioners.json``) restarts the engine anyway.

Neither pause touches the profile's jobs already submitted: they run, or end, as before.

A part of :class:`~fluksio.provisioners.machine.provisioning.ProvisioningMachine`, given its
:class:`~fluksio.provisioners.machine.state.MachineState` (the state, and the steps every rule
takes).
"""

from __future__ import annotations

from collections.abc import Mapping

from fluksio.errors import NotFound
from fluksio.provisioners.machine.effects import Effect, Log, RememberPause, Unwake
from fluksio.provisioners.machine.requests import MachineRequest
from fluksio.provisioners.machine.state import MachineState, ProfileEntry

__all__ = ["Pausing", "resume_hint"]


def resume_hint(profile: str) -> str:
    return f"resume with 'fluksio provisioners resume {profile}'"


class Pausing:
    def __init__(self, state: MachineState) -> None:
        self._state = state

    def pause(self, profile: str, by: str) -> list[Effect]:
        """A person (``by``) paused the profile: nothing of it is asked for until resumed."""
        entry = self._entry(profile)
        said = f"paused by {by}; {resume_hint(profile)}"
        entry.paused, entry.paused_by_hand = said, True
        logged = Log("warning", "provision.paused", {"profile": profile, "by": by})
        return [RememberPause(profile, said), logged, *self._state.changed()]

    def resume(self, profile: str, by: str) -> list[Effect]:
        """A person resumed the profile: its counts and its rest start again from nothing,
        so the next pass that needs it asks at once."""
        entry = self._entry(profile)
        effects: list[Effect] = []
        if entry.paused_by_hand:
            effects.append(RememberPause(profile, None))
        entry.paused, entry.paused_by_hand = None, False
        entry.failed_submissions = entry.failed_starts = entry.failures = 0
        entry.resting_until = None
        effects += [
            Unwake(f"rest:{profile}"),
            Log("info", "provision.resumed", {"profile": profile, "by": by}),
            *self._state.changed(),
        ]
        return effects

    def paused_before(self, pauses: Mapping[str, str]) -> list[Effect]:
        """The pauses by hand an earlier engine wrote down (profile -> its sentence); one
        of a profile no longer configured is forgotten."""
        effects: list[Effect] = []
        for profile, said in pauses.items():
            entry = self._state.entries.get(profile)
            if entry is None:
                effects.append(RememberPause(profile, None))
                continue
            entry.paused, entry.paused_by_hand = said, True
        return effects + self._state.changed()

    def count_failure(
        self, entry: ProfileEntry, request: MachineRequest, message: str, effects: list[Effect]
    ) -> None:
        """A request that brought no worker: one more failure in a row of its kind, and
        the profile pauses itself at its setting's count."""
        settings, key = entry.rule.settings, entry.rule.key
        if request.job_id is None:
            entry.failed_submissions += 1
            count, limit = entry.failed_submissions, settings.pause_after_failed_submissions
            what = "failed submissions"
        else:
            entry.failed_starts += 1
            count, limit = entry.failed_starts, settings.pause_after_failed_starts
            what = f"{entry.rule.job_noun}s that failed to start"
        if entry.paused is not None or not limit or count < limit:
            return
        entry.paused = f"paused after {count} {what} in a row (the last: {message}); " + (
            resume_hint(key)
        )
        fields = {"profile": key, "count": count, "error": message}
        effects.append(Log("warning", "provision.paused", fields))

    def _entry(self, profile: str) -> ProfileEntry:
        entry = self._state.entries.get(profile)
        if entry is None:
            known = ", ".join(self._state.entries) or "none"
            raise NotFound(f"profile: no profile {profile!r} is configured (configured: {known})")
        return entry
