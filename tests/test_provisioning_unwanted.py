"""The provisioning machine's rule for a queued job nothing waits for, step by step, in the
harness that holds it to its reference: withdrawn after the grace with no failure, or kept
when a waiting call wants its profile again first."""

from __future__ import annotations

import hypothesis.strategies as st

from tests.test_provisioning_machine import ProvisioningComparison


class _Drawn:
    """Stands in for hypothesis's ``data`` where a step names its request itself."""

    def __init__(self, value: str) -> None:
        self.value = value

    def draw(self, _strategy: st.SearchStrategy[str]) -> str:
        return self.value


def _queued(scene: ProvisioningComparison) -> str:
    scene.the_site_says_what_it_allows(None, None, None)  # read first, as at a first need
    scene.want("box/small")
    (request_id,) = scene.submits
    scene.answer_submission(_Drawn(request_id), "taken", still_logged_out=False)
    return request_id


def test_a_queued_job_no_pass_wants_is_withdrawn_after_the_grace_as_no_failure() -> None:
    scene = ProvisioningComparison()
    request_id = _queued(scene)
    scene.a_scheduling_pass({"box/big"})
    scene.time_passes(1.0)
    assert request_id not in scene.cancels, "kept through the grace"
    scene.time_passes(5.0)
    cancel = scene.cancels[request_id]
    assert not cancel.failed and cancel.message == "withdrawn: no waiting call needs it any more"
    assert scene.stored[request_id].withdrawn, "written down as withdrawn before the cancel"
    scene.both_hold_the_same_requests_and_profiles()


def test_wanted_again_within_the_grace_it_is_kept() -> None:
    scene = ProvisioningComparison()
    request_id = _queued(scene)
    scene.a_scheduling_pass(set())
    scene.time_passes(1.0)
    scene.a_scheduling_pass({"box/small"})
    scene.time_passes(30.0)  # well past the grace, before the provision timeout (60 s)
    assert request_id not in scene.cancels
    assert f"unwanted:{request_id}" not in scene.wakes
    scene.both_hold_the_same_requests_and_profiles()
