"""What ``sacctmgr`` says of a user, read for each profile: the limits its jobs run under
(the real accounting is read in ``test_slurm_site_limits.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.slurm.limits import (
    accounting_lines,
    parse_accounting,
    profile_limit,
)
from fluksio.provisioners.slurm.settings import SlurmProfile

# As the login node answers ACCOUNTING_SCRIPT: the user's associations, each after the
# user's default account (one on partition gpu only), and the QOS table.
SITE = """assoc|physics|physics||normal||20|
assoc|physics|physics|gpu|normal|1||1-00:00:00
assoc|physics|chemistry||long|||
qos|
qos|normal|2-00:00:00|8|
qos|long|7-00:00:00||3
qos|short|00:30:00|2|4
"""


def _limit(**profile: Any) -> SiteLimit:
    return profile_limit(parse_accounting(SITE), SlurmProfile(name="p", **profile))


def test_a_profile_takes_the_tightest_of_its_association_and_its_qos() -> None:
    assert _limit() == SiteLimit(8, "QOS 'normal' allows 8 running jobs per user (MaxJobsPerUser)")
    assert _limit(sbatch=["--qos=short"]).most_jobs == 2
    # An association on one partition counts only for a profile that names it.
    on_gpu = _limit(sbatch=["--partition=gpu"])
    assert on_gpu == SiteLimit(
        1,
        "the association of account 'physics' on partition 'gpu' allows 1 running job (MaxJobs)",
    )


def test_the_account_a_profile_names_brings_that_association_and_its_default_qos() -> None:
    assert _limit(sbatch=["-A chemistry"]) == SiteLimit(
        3, "QOS 'long' allows 3 jobs per user (MaxSubmitJobsPerUser)"
    )


@pytest.mark.parametrize(
    ("sbatch", "said"),
    [
        (
            ["--qos=short", "--time=01:00:00"],
            "profile 'p' asks for jobs of 01:00:00, longer than QOS 'short' allows (MaxWall"
            " 00:30:00); ask for less, or name another QOS or account",
        ),
        (
            ["--partition=gpu", "--time=2-00:00:00"],
            "profile 'p' asks for jobs of 2-00:00:00, longer than the association of account"
            " 'physics' allows (MaxWall 1-00:00:00); ask for less, or name another QOS or"
            " account",
        ),
        (
            ["--qos=nightly"],
            "profile 'p' asks for QOS 'nightly', which sacctmgr does not list (listed: long,"
            " normal, short)",
        ),
    ],
)
def test_a_profile_the_site_would_never_run_is_refused_with_why(
    sbatch: list[str], said: str
) -> None:
    assert _limit(sbatch=sbatch).refused == said


def test_a_site_without_accounting_has_no_limits_and_check_says_why() -> None:
    off = parse_accounting("off|You are not running a supported accounting_storage plugin\n")
    assert profile_limit(off, SlurmProfile(name="p", sbatch=["--qos=x"])) == SiteLimit()
    assert accounting_lines(off, {}) == [
        "sacctmgr: no accounting to read (You are not running a supported"
        " accounting_storage plugin): no association or QOS limits"
    ]


def test_check_shows_each_profiles_limit() -> None:
    accounting = parse_accounting(SITE)
    limits = {"p": SiteLimit(2, "QOS 'short' allows 2 running jobs per user (MaxJobsPerUser)"),
              "q": SiteLimit()}  # fmt: skip
    assert accounting_lines(accounting, limits) == [
        "sacctmgr:",
        "  profile 'p': at most 2 jobs at once: QOS 'short' allows 2 running jobs per user"
        " (MaxJobsPerUser)",
        "  profile 'q': no association or QOS limit on how many of its jobs",
    ]


def test_sacctmgr_failing_on_a_site_with_accounting_is_an_error_not_no_limits() -> None:
    # slurmdbd down for a moment: the last reading must stand, not "no limits".
    with pytest.raises(ValueError, match="sacctmgr: sacctmgr: error: Problem talking to the"):
        parse_accounting("off|sacctmgr: error: Problem talking to the database\n")
    assert parse_accounting("off|sh: 1: sacctmgr: not found\n").off == (
        "sh: 1: sacctmgr: not found"
    )


@pytest.mark.parametrize(
    "answer", ["assoc|physics||normal", "qos|normal|2-00:00:00|eight|", "what|is this"]
)
def test_an_answer_that_cannot_be_read_is_an_error_naming_it(answer: str) -> None:
    with pytest.raises(ValueError, match="sacctmgr's answer"):
        parse_accounting(answer)
