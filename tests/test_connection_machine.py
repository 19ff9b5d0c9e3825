"""A worker connection's life, told as the machine decides it: no socket, no clock, no loop.

Each test is one story a worker's owner would recognise (refused for a label, superseded
by its own restart, away while a relay drops and back, silent for 90 seconds, the
published agent given a call with a limit); the property tests hold the machine to its
reference over every order of events.
"""

from __future__ import annotations

from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.engine.workers.connection.effects import (
    Answering,
    Away,
    Cancel,
    CloseSocket,
    Fail,
    Gone,
    Ping,
    Wake,
)
from fluksio.engine.workers.connection.machine import (
    ConnectionMachine,
    ConnectionRules,
    unsigned_labels,
)
from fluksio.engine.workers.protocol import CLOSE_SUPERSEDED

RULES = ConnectionRules(
    take_within_s=15, answer_within_s=22.5, gone_after_s=90, limit_backstop_s=13
)


def _machine(*, relayed: bool = False, published: bool = False) -> ConnectionMachine:
    return ConnectionMachine("box", relayed, published, 100.0, RULES)


def test_labels_the_token_does_not_sign_are_refused_naming_them() -> None:
    said = unsigned_labels(["cpu", "gpu", "a100"], ("cpu",))
    assert said == (
        "labels a100, gpu are not signed by this worker's token (it signs cpu); mint a token"
        " with them or drop them from --labels"
    )
    assert unsigned_labels(["cpu"], ("cpu", "gpu")) is None


def test_a_superseded_connection_fails_its_calls_saying_so_and_then_is_gone() -> None:
    machine = _machine()
    machine.send("c1", 0, 101.0)
    reason = "superseded by a newer connection of the same worker"
    effects = machine.close(reason, CLOSE_SUPERSEDED)
    assert effects == [
        Fail(
            "c1",
            {
                "type": "WorkerGone",
                "message": reason,
                "short": f"WorkerGone: {reason}",
                "traceback": "",
            },
        ),
        CloseSocket(reason, CLOSE_SUPERSEDED),
    ]
    assert machine.send("c2", 0, 102.0)[0] == Fail("c2", effects[0].error)  # type: ignore[union-attr]
    assert machine.socket_ended(0) == [Gone(reason)]
    assert machine.close("again") == [] and machine.phase == "gone"


def test_a_relayed_worker_whose_socket_drops_mid_call_is_away_then_back_with_its_call() -> None:
    machine = _machine(relayed=True)
    machine.send("c1", 0, 101.0)
    assert machine.socket_ended(0) == [Answering(False), Away()]
    said = "worker box is away (its connection dropped); queued again"
    assert machine.send("c2", 0, 102.0) == [Fail("c2", _error(ErrorKind.NOT_TAKEN, said))]
    assert machine.check(110.0, busy=True) == [], "still not answering while away"
    back = machine.came_back(["c1", "done-meanwhile"], 120.0)
    assert back == [Cancel("done-meanwhile"), Answering(True)]
    assert machine.in_flight() == ["c1"] and machine.socket == 1
    assert machine.socket_ended(0) == [], "the old socket's end changes nothing"


def test_a_direct_worker_whose_socket_drops_fails_its_calls_at_once() -> None:
    machine = _machine()
    machine.send("c1", 0, 101.0)
    went = "worker went away mid-call"
    assert machine.socket_ended(0) == [Fail("c1", _error(ErrorKind.WORKER_GONE, went)), Gone(went)]


def test_a_worker_that_closes_with_no_call_in_flight_is_not_said_to_leave_mid_call() -> None:
    machine = _machine()
    machine.send("c1", 0, 101.0)
    machine.ended("c1")
    idle = "the worker closed its connection with no call in flight (idle, or stopped)"
    assert machine.socket_ended(0) == [Gone(idle)]


def test_a_worker_silent_for_90_seconds_stops_answering_then_is_closed() -> None:
    machine = _machine()
    machine.send("c1", 0, 100.0)
    assert machine.check(120.0, busy=True) == []
    assert machine.check(123.0, busy=True) == [Answering(False)]
    reason = "no message from the worker for 90 s while it was executing; its calls failed as gone"
    # Its path may be what went silent, the close lost with it: it may run the call still.
    assert machine.check(191.0, busy=True) == [
        Fail("c1", _error(ErrorKind.WORKER_GONE, reason), lingers=True),
        CloseSocket(reason, 1008),
    ]


def test_a_worker_heard_again_answers_again_at_the_watchers_next_look() -> None:
    machine = _machine()
    machine.send("c1", 0, 100.0)
    said = (
        "worker box sent nothing for 15 s after it was sent the call, so never took it;"
        " queued again for another worker"
    )
    effects = machine.timer("take", "c1")
    assert effects[1:] == [
        Answering(False),
        Cancel("c1"),
        Fail("c1", _error(ErrorKind.NOT_TAKEN, said)),
    ]
    assert machine.check(116.0, busy=False) == [], "not heard since: still not answering"
    machine.heard_from(117.0)
    assert machine.check(118.0, busy=False) == [Answering(True)]


def test_the_published_agent_is_pinged_after_a_call_and_stopped_at_its_limit() -> None:
    published, ours = _machine(published=True), _machine()
    assert published.send("c1", 5.0, 101.0) == [
        Wake("c1", "take", 15),
        Wake("c1", "limit", 5.0),
        Ping(),
    ]
    assert ours.send("c1", 5.0, 101.0) == [Wake("c1", "take", 15), Wake("c1", "limit", 18.0)]
    limit = {"type": "NodeLimit", "message": "ran for 5 s, its limit, and was stopped"}
    effects = published.timer("limit", "c1")
    assert effects[0] == Cancel("c1")
    assert {k: effects[1].error[k] for k in limit} == limit  # type: ignore[union-attr]
    assert published.timer("take", "c1") == [], "ended: its other timer does nothing"


def _error(kind: ErrorKind, message: str) -> dict[str, str]:
    return {
        "type": kind.value,
        "message": message,
        "short": f"{kind.value}: {message}",
        "traceback": "",
    }
