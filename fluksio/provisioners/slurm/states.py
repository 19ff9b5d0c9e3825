"""Slurm's job states onto the engine's: the one table, with why for each odd one."""

from __future__ import annotations

from collections.abc import Mapping

from fluksio.logs import get_logger
from fluksio.provisioners.base import JobState

__all__ = ["SLURM_STATES", "slurm_state"]

log = get_logger(__name__)

SLURM_STATES: Mapping[str, JobState] = {
    # Waiting for an allocation, or for one given back (squeue(1), JOB STATE CODES).
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,  # allocated, its nodes still booting
    "REQUEUED": JobState.PENDING,  # a completing job put back in the queue
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESIZING": JobState.PENDING,  # about to change size
    # "has an allocation, but execution has been suspended and CPUs have been released
    # for other jobs": it cannot run until it is resumed and given them back, as a job
    # waiting in the queue cannot; nothing of it ended.
    "SUSPENDED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,  # some processes still active
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    # "has an allocation, but execution has been stopped with SIGSTOP; CPUs have been
    # retained": it started and keeps its machine, and goes on at SIGCONT. Its worker is
    # frozen meanwhile, which the liveness rule (worker_gone_s) sees; the job has not
    # ended, so it is not cancelled or counted as a failure.
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,  # by its user (us) or an administrator
    # "Sibling was removed from cluster due to other cluster starting the job": another
    # cluster of the federation runs it, so this one was withdrawn, not failed.
    "REVOKED": JobState.CANCELLED,
    # "Job terminated due to preemption": Slurm ended it for a job of higher priority
    # (PreemptMode=CANCEL; with REQUEUE it shows as REQUEUED instead). The system ended
    # it, as an administrator's cancel would; its payload did not fail.
    "PREEMPTED": JobState.CANCELLED,
    # "terminated upon reaching its time limit", or "on deadline": ended by time.
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "FAILED": JobState.FAILED,  # a non-zero exit code or another failure
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    # "requeued in a special state", set by a site's EpilogSlurmctld for a particular
    # exit value: held until someone releases it, so for us its run has ended badly.
    "SPECIAL_EXIT": JobState.FAILED,
}
"""Slurm's job states (``squeue -o %T``) onto ours; anything else is UNKNOWN. The quoted
words are squeue(1)'s. Every terminal state ends the request alike; which one it was
shows in the words the screen and the log give (``job 42 ended PREEMPTED``)."""


def slurm_state(text: str) -> JobState:
    state = SLURM_STATES.get(text.strip().split(" ")[0].rstrip("+"))
    if state is None:
        log.warning("slurm.unknown_state", state=text)
        return JobState.UNKNOWN
    return state
