"""What a call waiting for a profile says, composed on the provisioning side.

The provisioning machine's state is built by hand here, one stand at a time; the
scheduler only puts ``provisioning hpc/gpu, `` before the sentence and, while the profile
rests after a failure, the time left (``tests/test_scheduler_reasons.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from fluksio.provisioners.base import JobState, JobStatus, SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest, ProfileRule, RequestStage
from fluksio.provisioners.machine.state import ProfileEntry, as_scheduled
from fluksio.scheduler import Provisioning
from tests.support.scripted import scripted_settings

LOGIN = "login needed: run 'fluksio provisioners login hpc'"
DOWN = "the way in through login1 is down since 10:00:00 UTC (connection lost)"


def _entry(max_workers: int = 1, **stands: Any) -> ProfileEntry:
    settings = scripted_settings(profiles=[{"name": "gpu", "max_workers": max_workers}])
    rule = ProfileRule(
        "hpc",
        "slurm",
        "Slurm job",
        settings,
        settings.profiles[0],
        None,
        starting="submitting a Slurm job",
    )
    return ProfileEntry(rule, **stands)


def _request(stage: RequestStage, job_id: str | None = "41", **more: Any) -> MachineRequest:
    return MachineRequest(f"r{job_id}", "hpc", "gpu", 100.0, stage=stage, job_id=job_id, **more)


def _told(entry: ProfileEntry, path_down: str | None = None) -> Provisioning:
    return as_scheduled(entry, path_down).provisioning


PENDING = JobStatus(JobState.PENDING, "PENDING", "Priority")


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        (_request(RequestStage.SUBMITTING, None), "submitting a Slurm job"),
        (
            _request(RequestStage.SUBMITTING, None, answer_lost="sbatch did not answer"),
            "submitting a Slurm job: its answer was lost (sbatch did not answer); looking for"
            " the Slurm job by its mark",
        ),
        (_request(RequestStage.QUEUED), "Slurm job 41 submitted"),
        (_request(RequestStage.QUEUED, status=PENDING), "Slurm job 41 PENDING (Priority)"),
        (
            _request(RequestStage.STARTED, status=JobStatus(JobState.RUNNING, "RUNNING")),
            "Slurm job 41 RUNNING, waiting for its worker to attach",
        ),
    ],
)
def test_a_request_under_way_says_where_it_stands(request_: MachineRequest, said: str) -> None:
    told = _told(_entry(outstanding=request_, live={request_.id: request_}))
    assert (told.said, told.under_way, told.outstanding, told.jobs) == (said, True, True, 1)


def test_with_room_for_several_jobs_how_many_run_comes_first() -> None:
    running = _request(RequestStage.ATTACHED, "40")
    pending = _request(RequestStage.QUEUED, "41", status=PENDING)
    live = {running.id: running, pending.id: pending}
    told = _told(_entry(4, outstanding=pending, live=live))
    assert told.said == "1 of 4 Slurm jobs running, Slurm job 41 PENDING (Priority)"


def test_a_failure_rests_and_counts_down_and_a_login_needed_comes_before_it() -> None:
    failed = _told(_entry(last_error=(90.0, "sbatch: invalid partition"), resting_until=130.0))
    assert failed.said == "the last attempt failed (sbatch: invalid partition)"
    assert failed.counting_down and failed.resting_until == 130.0 and failed.outstanding
    login = _told(_entry(last_error=(90.0, "old"), resting_until=130.0, login_needed=LOGIN))
    assert (login.said, login.counting_down) == (LOGIN, False)


def test_a_down_path_is_said_before_how_its_jobs_stand() -> None:
    started = _request(RequestStage.STARTED, status=JobStatus(JobState.RUNNING, "RUNNING"))
    entry = _entry(outstanding=started, live={started.id: started})
    assert _told(entry, DOWN).said == DOWN
    assert _told(entry).said == "Slurm job 41 RUNNING, waiting for its worker to attach"


def test_at_its_cap_with_nothing_under_way_it_says_it_waits_for_a_job_to_end() -> None:
    one, two = _request(RequestStage.ATTACHED, "40"), _request(RequestStage.STARTED, "41")
    told = _told(_entry(2, live={one.id: one, two.id: two}))
    assert told.said == (
        "max_workers reached: 2 Slurm jobs are alive (1 with a worker); the next goes out"
        " when one ends"
    )
    assert not told.under_way and told.jobs == 2


def test_under_the_sites_limit_it_names_the_limit_and_a_refusal_stops_it() -> None:
    one = _request(RequestStage.ATTACHED, "40")
    qos = "QOS 'short' allows 1 job per user (MaxSubmitJobsPerUser)"
    entry = _entry(4, live={one.id: one}, site=SiteLimit(1, qos))
    told = _told(entry)
    assert told.said == (
        f"the site's limit reached ({qos}): 1 Slurm job is alive (1 with a worker); the next"
        " goes out when one ends"
    )
    assert as_scheduled(entry).max_workers == 1, "the scheduler sees the site's cap"
    refused = "profile 'gpu' asks for jobs of 01:00:00, longer than QOS 'short' allows"
    stopped = _told(_entry(4, site=SiteLimit(refused=refused)))
    assert stopped.said == f"the site would not run its jobs: {refused}"
    assert stopped.paused, "nothing of it is asked for"


def test_with_nothing_to_say_it_says_nothing() -> None:
    told = _told(_entry(2))
    assert told == Provisioning()
