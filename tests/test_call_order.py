"""One call order from the engine to the launcher (issue 66): the run frame is the call's
description on both ends. What the engine builds, our agent reads back as the same typed
frame; a frame of the published protocol is the same bytes it always was; a frame of the
wrong shape is refused with a sentence naming the call and the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import (
    ArtifactRef,
    CancelFrame,
    ContainerRef,
    RunFrame,
    RunRef,
    StoreOffer,
    WelcomeFrame,
    encode,
    from_engine,
)
from tests.support.inprocess import ClientFactory, start_in_process

NODE = "def process(x=1):\n    return x\n"

PUBLISHED_GOLDEN = (
    '{"op": "run", "call_id": "<call>", "flow": "f", "node": "n", "source": "def process(x=1):'
    '\\n    return x\\n", "kwargs": {"x": 2}, "run": {"id": "<run>"}, "timeout": 30.0, "env": '
    '{"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", '
    '"VECLIB_MAXIMUM_THREADS": "2", "NUMEXPR_NUM_THREADS": "2", "BLIS_NUM_THREADS": "2", '
    '"RAYON_NUM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "2", '
    '"CUDA_VISIBLE_DEVICES": "0", "FLUKSIO_ARTIFACT_TOKEN": "<token>"}, "limit": 60.0, '
    '"ram_mb": 100}'
)
"""The run frame the engine sent the published agent before the call order was one type
(recorded from that code): it must not change by a byte."""


def _normalised(text: str, call_id: str, run_id: str) -> str:
    text = text.replace(call_id, "<call>").replace(run_id, "<run>")
    return re.sub(r'"FLUKSIO_ARTIFACT_TOKEN": "[^"]+"', '"FLUKSIO_ARTIFACT_TOKEN": "<token>"', text)


@pytest.mark.parametrize("published", [True, False], ids=["published", "ours"])
async def test_the_engine_sends_the_published_agent_the_same_bytes_and_ours_the_typed_call(
    aiohttp_client: ClientFactory, tmp_path: Path, published: bool
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "d")
    node = {
        "id": "n",
        "code": NODE,
        "worker": "box",
        "timeout": 30,
        "limit": 60,
        "params": {"x": 2},
        "resources": {"cpus": 2, "gpus": 1, "ram_mb": 100},
    }
    assert (await api.put_flow("f", [node])).status == 201
    token = await api.mint("box", ["box"])
    worker = await api.attach(
        token, name="box", labels=["box"], published=published, cpus=4, gpus=2, ram_mb=4000
    )
    run = await api.start_run("f")
    call = await worker.next_call()
    text = worker.texts[call["call_id"]]
    if published:
        assert _normalised(text, call["call_id"], run["id"]) == PUBLISHED_GOLDEN
        return
    read = from_engine(json.loads(text))
    assert isinstance(read, RunFrame)
    assert read.threads == 2 and "OMP_NUM_THREADS" not in read.env, "ours sets the caps itself"
    assert read.limit == 60.0 and read.until_job_end is False and read.restored is None
    assert read.run == RunRef(id=run["id"]) and read.kwargs == {"x": 2}
    assert encode(read) == text, "what the engine sent, the agent reads back as the same frame"


def test_every_engine_frame_reads_back_as_its_declared_class() -> None:
    sent = RunFrame(
        call_id="c1",
        flow="f",
        node="n",
        source=NODE,
        kwargs={"x": [1, 2]},
        run=RunRef(id="r1"),
        timeout=30.0,
        env={"CUDA_VISIBLE_DEVICES": "0"},
        limit=60.0,
        ram_mb=300,
        until_job_end=True,
        container=ContainerRef(image="registry.example/lab/cuda:12"),
        threads=4,
        restored=ArtifactRef(digest="sha256:" + "a" * 64, size=3, name="checkpoint"),
    )
    welcome = WelcomeFrame(name="w", store=StoreOffer(path="/s", probe="p", nonce="n"), kept=[])
    for frame in (
        sent,
        RunFrame(op="compile", call_id="c2", flow="f", node="n", source=""),
        CancelFrame(call_id="c1"),
        welcome,
    ):
        assert from_engine(json.loads(encode(frame))) == frame
    # A newer engine's op and keys are ignored; a whole number stands for seconds.
    assert from_engine({"op": "someday", "call_id": "c3"}) is None
    newer = {**json.loads(encode(sent)), "priority": 3, "timeout": 30}
    assert from_engine(newer) == sent


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"kwargs": [1]}, "call c1: kwargs: expected an object"),
        ({"limit": "soon"}, "call c1: limit: expected a number, got str"),
        ({"until_job_end": 1}, "call c1: until_job_end: expected true or false, got int"),
        ({"container": {"runtime": "podman"}}, "call c1: container.image: missing"),
        ({"container": "cuda:12"}, "call c1: container: expected an object"),
        ({"env": {"A": 1}}, "call c1: env.A: expected text, got int"),
        ({"op": "run", "source": None}, "call c1: source: missing"),
        ({"restored": {"digest": "sha256:x"}}, "call c1: restored.size: missing"),
        ({"call_id": ""}, "a run frame without a call_id"),
    ],
)
def test_a_frame_of_the_wrong_shape_is_refused_naming_the_call_and_the_field(
    change: dict[str, object], said: str
) -> None:
    frame = {**json.loads(encode(RunFrame(call_id="c1", flow="f", node="n", source=""))), **change}
    with pytest.raises(ValueError, match=re.escape(said)):
        from_engine(frame)
