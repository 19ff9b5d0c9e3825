"""The provisioning machine against its naive reference, over what Hypothesis makes happen.

Calls want machines of two profiles; submissions are taken, refused, lost (with or without
a job queued) or stopped by a login; polls and searches answer or fail; jobs start and
end by themselves; workers attach and leave; cancels succeed or fail; time passes and
timers fire; the engine is killed and started again on what it wrote down, or shut down.
Both implementations get the same inputs; after every step they must hold the same
requests in the same stages, the same rests, failures, logins and last errors, and have
made the same decisions. And the promises hold:

- at most one pending request per profile, and never more jobs alive than ``max_workers``;
- a request's token is revoked when it ends;
- nothing is submitted while a login is needed (only asked whether one still is), nor
  for a paused profile; failures in a row of one cause pause it, and a pause by hand is
  written down for the next engine;
- at shutdown every submitted request is adopted (its worker attached) or cancelled, and a
  cancel the engine stopped before it answered is finished by the next, as no failure.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from fluksio.provisioners.base import TERMINAL_STATES, JobState, JobStatus, SiteLimit, WorkerRecord
from fluksio.provisioners.machine.requests import RequestStage
from tests.support.properties import against_reference
from tests.support.provisioning_comparison import PROFILES, ComparisonShell


class ProvisioningComparison(ComparisonShell):
    # -- what happens --------------------------------------------------------------------

    @precondition(lambda self: not self.closing)
    @rule(profile=st.sampled_from(PROFILES))
    def want(self, profile: str) -> None:
        provisioner, name = profile.split("/")
        self.both("want", provisioner, name, self.now)

    @precondition(lambda self: not self.closing)
    @rule(wanted=st.sets(st.sampled_from(PROFILES)))
    def a_scheduling_pass(self, wanted: set[str]) -> None:
        """What the waiting calls would use now: a queued job of another profile is
        withdrawn after the grace, unless wanted again first."""
        self.both("wanted", frozenset(wanted), self.now)

    @rule(profile=st.sampled_from(PROFILES), pause=st.booleans())
    def a_person_pauses_or_resumes(self, profile: str, pause: bool) -> None:
        self.both("pause" if pause else "resume", profile, "alice")

    @rule(
        small=st.sampled_from([None, 0, 1, 3]),
        big=st.sampled_from([None, 1]),
        refused=st.sampled_from([None, "small", "big"]),
    )
    def the_site_says_what_it_allows(
        self, small: int | None, big: int | None, refused: str | None
    ) -> None:
        """The site's accounting read again: each profile's most jobs, or a refusal."""
        limits = {
            name: SiteLimit(most, f"QOS allows {most}", "too long" if refused == name else None)
            for name, most in (("small", small), ("big", big))
        }
        self.site_limits = {f"box/{name}": limit for name, limit in limits.items()}
        self.both("site_read", "box", limits)

    @rule()
    def the_site_cannot_be_read(self) -> None:
        """slurmdbd is down: the last reading stands, and what waited for it goes on."""
        self.both("site_unread", "box")

    @precondition(lambda self: bool(self.submits))
    @rule(
        data=st.data(),
        answer=st.sampled_from(
            ["taken", "refused", "unreachable", "lost-queued", "lost-nothing", "login"]
        ),
        still_logged_out=st.booleans(),
    )
    def answer_submission(self, data: st.DataObject, answer: str, still_logged_out: bool) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.submits)))
        submit = self.submits.pop(request_id)
        if self.machine.request(request_id) is None:
            return  # the driver sends nothing for a request that ended first
        if submit.check_login and still_logged_out:
            self.both("login_still_needed", submit.profile, request_id, self.now)
            return
        jti = f"jti-{request_id}"
        self.minted[request_id] = jti
        self.both("minted", submit.profile, request_id, jti)
        request = self.machine.request(request_id)
        assert request is not None
        self.stored[request_id] = dataclasses.replace(request)  # written before it is sent
        if answer == "taken":
            self.both(
                "submitted", submit.profile, request_id, self._queue_job(request_id), self.now
            )
        elif answer == "refused":
            self.both("submit_failed", submit.profile, request_id, "invalid account", self.now)
        elif answer == "unreachable":
            said = "cannot reach the login node"
            self.both("submit_failed", submit.profile, request_id, said, self.now, unreachable=True)
        elif answer == "login":
            self.both("submit_failed", submit.profile, request_id, "code?", self.now, login=True)
        else:
            if answer == "lost-queued":
                self._queue_job(request_id)
            lost = "sbatch did not answer"
            self.both("submit_failed", submit.profile, request_id, lost, self.now, uncertain=True)

    @precondition(lambda self: not self.closing)
    @rule(
        profile=st.sampled_from(PROFILES),
        endings=st.lists(
            st.sampled_from(["refused", "unreachable", "before its worker"]), min_size=1, max_size=4
        ),
    )
    def a_profile_fails_in_a_row(self, profile: str, endings: list[str]) -> None:
        """The site refuses the profile's submissions, or takes them and their jobs end
        before their worker attaches, one after another (each after the rest the last
        failure began)."""
        for ends in endings:
            self.time_passes(90.0)
            self.want(profile)
            mine = [r for r, submit in self.submits.items() if submit.profile == profile]
            if not mine:
                return  # paused, pending, at its cap, or rests
            submit = self.submits.pop(mine[0])
            self.both("minted", profile, submit.request_id, f"jti-{submit.request_id}")
            self.minted[submit.request_id] = f"jti-{submit.request_id}"
            request = self.machine.request(submit.request_id)
            assert request is not None
            self.stored[request.id] = dataclasses.replace(request)  # written before it is sent
            if ends != "before its worker":
                reach = ends == "unreachable"
                self.both(
                    "submit_failed", profile, submit.request_id, ends, self.now, unreachable=reach
                )
                continue
            job_id = self._queue_job(submit.request_id)
            self.both("submitted", profile, submit.request_id, job_id, self.now)
            self.jobs[job_id].status = JobStatus(JobState.FAILED, "FAILED")
            self.answer_poll(search_fails=False, poll="answers")

    @precondition(lambda self: bool(self.cancels))
    @rule(data=st.data(), works=st.booleans())
    def answer_cancel(self, data: st.DataObject, works: bool) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.cancels)))
        cancel = self.cancels.pop(request_id)
        job_id = cancel.job_id
        if cancel.look_first:
            job_id = next((j for j, job in self.jobs.items() if job.request_id == request_id), None)
        message = cancel.message
        if works:
            self._cancel_job(request_id)
        else:
            message += " (cancelling it failed: unreachable)"
            self.unreachable.add(request_id)
        self.both(
            "cancelled",
            cancel.profile,
            request_id,
            message,
            self.now,
            failed=cancel.failed,
            job_id=job_id,
        )

    @precondition(lambda self: bool(self.polls))
    @rule(search_fails=st.booleans(), poll=st.sampled_from(["answers", "fails", "login"]))
    def answer_poll(self, search_fails: bool, poll: str) -> None:
        self.polls.discard("box")
        lost = self.machine.lost_requests("box")
        assert lost == sorted(
            r.id for r in self.reference.ledger.values()
            if r.stage is not RequestStage.ENDED and r.job_id is None and r.answer_lost
        )  # fmt: skip
        if lost:
            if search_fails:
                self.both("found", "box", lost, None, self.now, "unreachable")
            else:
                marks = {
                    job.request_id: j for j, job in self.jobs.items() if job.request_id in lost
                }
                self.both("found", "box", lost, marks, self.now)
        job_ids = self.machine.jobs_to_poll("box")
        if job_ids:
            if poll == "answers":
                states = {j: self.jobs[j].status for j in job_ids if j in self.jobs}
                self.both("polled", "box", job_ids, states, self.now)
            else:
                login = poll == "login"
                self.both("polled", "box", job_ids, None, self.now, "refused", login=login)
        self.apply(self.machine.poll_ended("box", self.now))

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data(), ends=st.booleans())
    def a_job_moves(self, data: st.DataObject, ends: bool) -> None:
        job = self.jobs[data.draw(st.sampled_from(sorted(self.jobs)))]
        if job.status.state not in TERMINAL_STATES:
            state = JobState.COMPLETED if ends else JobState.RUNNING
            job.status = JobStatus(state, state.name)

    @rule(data=st.data())
    def a_worker_attaches(self, data: st.DataObject) -> None:
        running = sorted(
            (job.request_id, job_id)
            for job_id, job in self.jobs.items()
            if job.status.state is JobState.RUNNING and job.request_id in self.minted
        )
        if not running:
            return
        request_id, job_id = data.draw(st.sampled_from(running))
        request = self.machine.request(request_id)
        if request is None or request.stage is RequestStage.ATTACHED:
            return
        event = WorkerRecord(
            f"w-{request_id}", "box", ("hpc",), "box", request.profile, request_id, job_id
        )
        self.attached[event.worker_id] = event
        self.both("worker_attached", event, self.now)

    @precondition(lambda self: bool(self.attached))
    @rule(data=st.data())
    def a_worker_leaves(self, data: st.DataObject) -> None:
        event = self.attached.pop(data.draw(st.sampled_from(sorted(self.attached))))
        self.apply(self.machine.worker_gone(event, self.now))  # only polls sooner

    @rule(seconds=st.sampled_from([1.0, 5.0, 30.0, 90.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        while True:
            due = sorted((at, key) for key, at in self.wakes.items() if at <= self.now)
            if not due:
                return
            _at, key = due[0]
            del self.wakes[key]
            self.both("woke", key, self.now)

    @rule()
    def engine_killed(self) -> None:
        """Nothing is cancelled; what was written down and the outside system stay."""
        self._start()
        self.both("recover", [dataclasses.replace(r) for r in self.stored.values()], self.now)
        self.both("paused_before", dict(self.stored_pauses))

    @precondition(lambda self: not self.closing)
    @rule()
    def engine_stopped(self) -> None:
        """Shut down: every request whose worker has not attached is cancelled."""
        self.closing = True
        self.both("closing")
        for request_id in sorted(self.submits):  # submissions under way answer first
            self.answer_submission_taken(request_id)
        self.both("close")
        while self.cancels:
            request_id = min(self.cancels)
            cancel = self.cancels.pop(request_id)
            self._cancel_job(request_id)
            self.both(
                "cancelled", cancel.profile, request_id, cancel.message, self.now,
                failed=cancel.failed, job_id=cancel.job_id,
            )  # fmt: skip
        for profile in self.machine.profiles():
            for request in profile.jobs:
                assert request.stage is RequestStage.ATTACHED, "adopted, or cancelled and ended"
        for job in self.jobs.values():
            found = self.machine.request(job.request_id)
            alive = job.status.state not in TERMINAL_STATES
            if alive and job.request_id not in self.unreachable:
                assert found is not None and found.stage is RequestStage.ATTACHED
        self.engine_killed()

    @precondition(lambda self: not self.closing)
    @rule(data=st.data())
    def engine_stopped_before_its_cancels_answered(self, data: st.DataObject) -> None:
        """A graceful stop whose cancels outlast the engine's patience: some jobs were
        cancelled, the engine never heard. The next one finishes each cancel, and counts
        none of them as a failed start (before, each was one: the profile backed off)."""
        self.closing = True
        self.both("closing")
        for request_id in sorted(self.submits):
            self.answer_submission_taken(request_id)
        self.both("close")
        withdrawn = sorted(self.cancels)
        for request_id in withdrawn:
            if data.draw(st.booleans(), label=f"{request_id} cancelled before the engine died"):
                self._cancel_job(request_id)
        self.engine_killed()
        # Only a cancel written down as a withdrawal is sent again: one of a timeout whose
        # worker attached meanwhile was no withdrawal (close() left it).
        assert sorted(self.cancels) == [
            r for r in withdrawn if r in self.stored and self.stored[r].withdrawn
        ]
        for request_id in sorted(self.cancels):
            cancel = self.cancels.pop(request_id)
            assert not cancel.failed
            self._cancel_job(request_id)
            self.both(
                "cancelled", cancel.profile, request_id, cancel.message, self.now,
                failed=False, job_id=cancel.job_id,
            )  # fmt: skip
        if self.polls:
            self.answer_poll(search_fails=False, poll="answers")
        for status in self.machine.profiles():
            assert (status.failures, status.retry_at) == (0, None), status.profile.name
            assert status.outstanding is None

    def answer_submission_taken(self, request_id: str) -> None:
        submit = self.submits.pop(request_id)
        if self.machine.request(request_id) is None:
            return
        jti = f"jti-{request_id}"
        self.minted[request_id] = jti
        self.both("minted", submit.profile, request_id, jti)
        job_id = self._queue_job(request_id)
        self.both("submitted", submit.profile, request_id, job_id, self.now)

    # -- what must always hold -------------------------------------------------------------

    @invariant()
    def both_hold_the_same_requests_and_profiles(self) -> None:
        for status in self.machine.profiles():
            key = f"{status.provisioner}/{status.profile.name}"
            reference = self.reference
            assert {r.id: (r.stage, r.job_id) for r in status.jobs} == {
                r.id: (r.stage, r.job_id) for r in reference.alive(key)
            }, key
            pending = reference.pending(key)
            assert len(pending) <= 1, "at most one pending request per profile"
            outstanding = status.outstanding.id if status.outstanding is not None else None
            assert outstanding == (pending[0].id if pending else None), key
            assert status.retry_at == reference.rest_until[key], key
            assert status.failures == reference.failures[key], key
            assert (status.login_needed is not None) is reference.login[key], key
            last = status.last_error[1] if status.last_error is not None else None
            assert last == reference.last_error[key], key
            assert (status.paused is not None) is reference.paused[key], key
            assert (key in self.stored_pauses) is (key in reference.paused_by_hand), key

    @invariant()
    def every_job_and_lost_submission_is_watched(self) -> None:
        watched = self.machine.jobs_to_poll("box") or self.machine.lost_requests("box")
        if watched and not self.closing:
            assert "poll:box" in self.wakes or "box" in self.polls, "a poll is due"

    @invariant()
    def jobs_alive_never_exceed_max_workers(self) -> None:
        for status in self.machine.profiles():
            assert len(status.jobs) <= status.profile.max_workers

    @invariant()
    def an_ended_requests_token_is_revoked(self) -> None:
        alive = {r.id for status in self.machine.profiles() for r in status.jobs}
        for request_id, jti in self.minted.items():
            if request_id not in alive and request_id not in self.stored:
                assert jti in self.revoked, request_id


TestProvisioningMachineAgreesWithItsReference = against_reference(ProvisioningComparison)
