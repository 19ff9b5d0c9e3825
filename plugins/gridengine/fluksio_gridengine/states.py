"""Grid Engine's job states (``qstat``'s letters) onto the engine's, with why for each.

``qstat`` shows a job's state as letters that combine (``qw``, ``hqw``, ``r``, ``Rr``,
``dr``, ``Eqw``, ``s``); qstat(1) lists them. A job that has ended is no longer listed at
all: the engine takes a job missing from a poll's answer as ended.
"""

from __future__ import annotations

from fluksio.provisioners import JobState

__all__ = ["GE_LETTERS", "ge_state"]

GE_LETTERS: tuple[tuple[str, JobState, str], ...] = (
    # First match wins: the letters that change what a job's other letters mean come first.
    # "E": the job could not start (its output path, its shell, a prolog failed) and stays
    # queued in error until someone clears it. It will never run by itself: failed.
    ("E", JobState.FAILED, "in error"),
    # "d": it is being deleted (by us, its owner, or an administrator): it is ending.
    ("d", JobState.CANCELLED, "being deleted"),
    # "r" running, "t" being transferred to its host (it has its slots), "R" restarted.
    ("r", JobState.RUNNING, "running"),
    ("t", JobState.RUNNING, "starting on its host"),
    # "s", "S", "T": suspended (by its owner, its queue, or a load threshold). It keeps its
    # slots and goes on where it stopped; its worker is frozen meanwhile, which the
    # liveness rule sees. It has not ended, so it is neither cancelled nor a failure.
    ("s", JobState.RUNNING, "suspended"),
    ("S", JobState.RUNNING, "suspended with its queue"),
    ("T", JobState.RUNNING, "suspended at a load threshold"),
    # "h": held (a hold, a dependency): waiting as long as the hold stays.
    ("h", JobState.PENDING, "held"),
    # "q w": queued and waiting; "R q": restarted and queued again.
    ("w", JobState.PENDING, "waiting"),
    ("q", JobState.PENDING, "queued"),
)
"""Each state letter, what it is for the engine, and in words."""


def ge_state(letters: str) -> tuple[JobState, str | None]:
    """The engine's state of a job with these ``qstat`` letters, and the words for an odd
    one (held, suspended, in error, being deleted); None for plain waiting or running."""
    for letter, state, words in GE_LETTERS:
        if letter in letters:
            plain = letter in "rwq" and not set(letters) - set("qwrR")
            return state, None if plain else words
    return JobState.UNKNOWN, f"state {letters!r}"
