"""The attach socket's frames: declared once by the agent, validated by the engine.

What the agent encodes, the engine parses back to the very same declaration; what the
published agent sends (no ``version``, ``parallel`` for ``max_parallel``, extra keys) is
accepted; what is out of bounds is refused naming the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fluksio.agent.protocol import frames as wire
from fluksio.agent.protocol.frames import (
    PROTOCOL,
    AnswerFrame,
    ArtifactRef,
    ErrorRecord,
    HelloFrame,
    InventoryReport,
    ProgressFrame,
    encode,
)
from fluksio.engine.workers.protocol import (
    FrameError,
    ValidationError,
    parse_hello,
    parse_worker_frame,
)

ROOT = Path(__file__).resolve().parent.parent


def test_what_the_agent_encodes_the_engine_parses_back_unchanged() -> None:
    hello = HelloFrame(
        protocol=PROTOCOL,
        name="gpu-a",
        labels=["gpu"],
        python="/usr/bin/python3",
        max_parallel=4,
        inventory=InventoryReport(cpus=16, gpus=2, ram_mb=65536),
        version="0.2.0",
        slurm_job_id="41",
        ends_at=1_800_000_000.0,
        notice_s=90.0,
    )
    assert parse_hello(json.loads(encode(hello))) == hello
    for frame in (
        ProgressFrame(call_id="c1", event="emit", outputs={"x": 1}, ts=12.5),
        ProgressFrame(call_id="c1", event="heartbeat"),
        AnswerFrame(call_id="c1", ok=True, result={"y": [1, 2]}, logs="hi\n"),
        AnswerFrame(call_id="c2", ok=False, error=ErrorRecord(type="ValueError", message="no")),
        AnswerFrame(
            call_id="c3",
            ok=False,
            error=ErrorRecord(type="Checkpointed", message="saved"),
            checkpoint=ArtifactRef(digest="sha256:" + "0f" * 32, size=9, name="checkpoint"),
        ),
    ):
        assert parse_worker_frame(encode(frame)) == frame


def test_an_answer_carries_either_its_result_or_its_error() -> None:
    assert "error" not in json.loads(encode(AnswerFrame(call_id="c", ok=True, result=1)))
    failed = json.loads(encode(AnswerFrame(call_id="c", ok=False, error=ErrorRecord())))
    assert "result" not in failed and failed["error"]["type"] == "RemoteError"


def test_the_published_agents_hello_is_accepted_as_it_is() -> None:
    published = {
        "op": "hello",
        "protocol": 2,
        "name": "box",
        "labels": ["gpu"],
        "python": "/opt/venv/bin/python",
        "parallel": 3,
        "venv_digest": "abc",
        "inventory": {"cpus": 8, "gpus": 1, "ram_mb": None},
        "something_new": {"ignored": True},
    }
    hello = parse_hello(published)
    assert hello.max_parallel == 3 and hello.version is None
    assert hello.inventory == InventoryReport(cpus=8, gpus=1, ram_mb=None)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "x" * 64}, "name"),
        ({"name": ""}, "name"),
        ({"name": "gpu box"}, "name"),
        ({"name": "-box"}, "name"),
        ({"name": "box/../x"}, "name"),
        ({"labels": [f"l{i}" for i in range(65)]}, "labels"),
        ({"max_parallel": 0}, "max_parallel"),
        ({"inventory": {"gpus": -1}}, "inventory.gpus"),
        ({"notice_s": -1}, "notice_s"),
    ],
)
def test_a_hello_out_of_bounds_is_refused_naming_the_field(
    change: dict[str, object], field: str
) -> None:
    with pytest.raises(FrameError, match=f"^{re.escape(field)}:") as raised:
        parse_hello({"op": "hello", "protocol": 2, "name": "box", **change})
    if field == "name":
        assert str(raised.value).endswith(
            "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or"
            " digit; pass another --name"
        )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"call_id": "c", "ok": "yes"}', ("answer", "ok")),
        ('{"call_id": "c", "ok": 1}', ("answer", "ok")),
        ('{"call_id": 7, "ok": true}', ("answer", "call_id")),
        ('{"call_id": "c", "event": "emit", "ts": "soon"}', ("progress", "ts")),
        ('{"event": "emit"}', ("progress", "call_id")),
        (
            '{"call_id": "c", "ok": false, "checkpoint": {"digest": "sha256:", "size": "9"}}',
            ("answer", "checkpoint", "size"),
        ),
    ],
)
def test_a_frame_of_the_wrong_type_is_refused_naming_the_field_never_coerced(
    text: str, where: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_worker_frame(text)
    assert raised.value.errors()[0]["loc"] == where


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"digest": "sha256:nothex", "size": 1},
        {"digest": "sha256:" + "0f" * 32, "size": -1},
        {"digest": "sha256:" + "0f" * 32, "size": 9, "name": "x" * 2000},
    ],
)
def test_a_checkpoint_that_is_no_artifact_reference_is_refused(checkpoint: object) -> None:
    frame = {"call_id": "c", "ok": False, "error": {"type": "Checkpointed"}}
    with pytest.raises(FrameError, match=r"^checkpoint: "):
        parse_worker_frame(json.dumps({**frame, "checkpoint": checkpoint}))


def test_a_stopping_word_is_read_and_its_reason_bounded() -> None:
    said = wire.StoppingFrame(reason="told to stop (SIGTERM)")
    assert parse_worker_frame(encode(said)) == said
    with pytest.raises(FrameError, match=r"^reason: at most 512 characters"):
        parse_worker_frame(encode(wire.StoppingFrame(reason="x" * 513)))


def test_strings_for_numbers_in_a_hello_are_refused() -> None:
    with pytest.raises(ValidationError) as raised:
        parse_hello({"op": "hello", "protocol": 2, "name": "b", "inventory": {"cpus": "8"}})
    assert raised.value.errors()[0]["loc"] == ("inventory", "cpus")
    with pytest.raises(FrameError, match="call_id"):
        parse_worker_frame('{"call_id": "", "ok": true}')


def test_the_protocol_number_is_defined_once() -> None:
    found = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "fluksio").rglob("*.py")
        if re.search(r"^PROTOCOL\s*=", path.read_text(), flags=re.M)
    ]
    # The runner's PROTOCOL is its pipe to the launcher, a conversation of its own.
    assert sorted(found) == ["fluksio/agent/protocol/frames.py", "fluksio/agent/runner/protocol.py"]
