"""Calls in containers, the rules around the runtime: what a node may ask, what a worker
reports and is sent, who is placed where and what a waiting call says, the worker's and a
profile's command lines. In process; podman itself is in ``test_containers.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from fluksio.agent.containers import Apptainer, Mount
from fluksio.agent.protocol.frames import (
    ContainerRef,
    ContainersReport,
    RunFrame,
    encode,
    from_engine,
)
from fluksio.client import Client
from fluksio.provisioners.base import ProfileSettings, ProvisionerSettings, worker_argv
from fluksio.wire.flows import NodeSpec
from tests.support.inprocess import InProcessEngine
from tests.support.runs import nodes_of
from tests.support.wait import poll_async

NODE = "def process():\n    return 1\n"
IMAGE = "registry.example/cuda:12"


def _refusal(**node: object) -> str:
    with pytest.raises(ValidationError) as refused:
        NodeSpec.model_validate({"id": "n", "code": NODE, **node})
    return str(refused.value)


def test_a_node_in_a_container_needs_a_worker_label_an_image_and_a_known_runtime() -> None:
    assert 'give it a "worker" label' in _refusal(container={"image": IMAGE})
    prefer = _refusal(worker="gpu", worker_policy="prefer", container={"image": IMAGE})
    assert "would run it on the engine, which runs no containers" in prefer
    assert "container.image" in _refusal(worker="gpu", container={"image": "--privileged"})
    assert "container.image" in _refusal(worker="gpu", container={"image": "a b"})
    assert "container.runtime" in _refusal(
        worker="gpu", container={"image": IMAGE, "runtime": "lxc"}
    )
    fine = NodeSpec.model_validate(
        {"id": "n", "code": NODE, "worker": "gpu", "container": {"image": IMAGE}}
    )
    assert fine.container is not None and fine.container.runtime is None


def test_the_executor_refuses_a_container_without_a_worker_before_any_call() -> None:
    client = Client("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="container"):
        client.executor(container=IMAGE)
    executor = client.executor(worker="gpu", container={"image": IMAGE, "runtime": "podman"})
    executor.shutdown(wait=False)


def test_a_run_frame_carries_its_container_and_one_named_badly_is_refused() -> None:
    frame = RunFrame(call_id="c", flow="f", node="n", source=NODE)
    assert "container" not in json.loads(encode(frame)), "none is left out of the frame"
    sent = RunFrame(
        call_id="c", flow="f", node="n", source=NODE, container=ContainerRef(image=IMAGE)
    )
    read = from_engine(json.loads(encode(sent)))
    assert isinstance(read, RunFrame) and read.container == ContainerRef(image=IMAGE)
    for bad in ({"runtime": "podman"}, "cuda:12", {"image": IMAGE, "runtime": 3}):
        raw = {**json.loads(encode(frame)), "container": bad}
        with pytest.raises(ValueError, match="call c: container"):
            from_engine(raw)  # never run on the host instead


async def test_the_api_refuses_a_container_it_could_not_run_naming_the_field(
    api: InProcessEngine,
) -> None:
    bad = {"id": "n", "code": NODE, "worker": "gpu", "container": {"image": "--privileged"}}
    refused = await api.put_flow("bad-image", [bad])
    assert refused.status == 422, refused
    assert refused.body["detail"].startswith("nodes.0.container.image: "), refused.body
    assert "it goes into the runtime's command line" in refused.body["detail"]
    unlabelled = {"id": "n", "code": NODE, "container": {"image": IMAGE}}
    refused = await api.put_flow("no-label", [unlabelled])
    assert refused.status == 422 and 'give it a "worker" label' in refused.body["detail"]
    assert (await api.request("GET", "/flows/bad-image")).status == 404, "nothing was saved"


async def test_the_engine_sends_the_container_only_to_a_worker_that_runs_it(
    api: InProcessEngine,
) -> None:
    node = {"id": "n", "code": NODE, "worker": "gpu", "container": {"image": IMAGE}}
    await api.put_flow("in-image", [node])
    plain = await api.attach(await api.mint("plain", ["gpu"]), name="plain", labels=["gpu"])
    run = await api.start_run("in-image")
    assert run["reason"].startswith(
        f"no worker may run image {IMAGE!r}; of those with 'gpu': plain runs"
    ), run
    report = ContainersReport(runtime="podman", images=["registry.example/*"])
    box = await api.attach(
        await api.mint("box", ["gpu"]), name="box", labels=["gpu"], containers=report
    )
    call = await box.next_call()
    assert call["container"] == {"image": IMAGE, "runtime": None}
    await box.answer(call["call_id"], 7)
    done = nodes_of(await api.wait_run(run["id"]))["n"]
    assert (done["ran_on"], done["result"]) == ("box", 7)
    assert plain.greeting["op"] == "welcome"


async def test_a_hello_with_containers_past_the_bounds_is_refused_naming_the_field(
    api: InProcessEngine,
) -> None:
    token = await api.mint("box", [])
    for report, field in (
        (ContainersReport(runtime="lxc", images=["x"]), "containers.runtime"),
        (ContainersReport(runtime="podman", images=["x"] * 65), "containers.images"),
    ):
        refused = await api.attach(token, name="box", containers=report)
        assert refused.greeting["op"] == "refused" and field in refused.greeting["reason"], (
            refused.greeting
        )


def test_a_profiles_containers_go_on_its_workers_command_line() -> None:
    profile = ProfileSettings.model_validate(
        {"name": "gpu", "containers": {"allow_images": ["registry.example/*", "/images/*.sif"]}}
    )
    settings = ProvisionerSettings[ProfileSettings](
        type="t",
        name="hpc",
        engine_url="wss://engine.example/api/v1/workers/attach",
        profiles=[profile],
    )
    argv = worker_argv("fluksio-worker", settings, profile)
    assert argv[argv.index("--containers") :] == [
        "--containers", "podman",
        "--allow-image", "registry.example/*",
        "--allow-image", "/images/*.sif",
    ]  # fmt: skip
    with pytest.raises(ValidationError, match="allow_images"):
        ProfileSettings.model_validate({"name": "gpu", "containers": {"allow_images": ["-v"]}})


def test_apptainer_runs_the_runner_in_the_image_with_its_gpus_and_nothing_else() -> None:
    """Not run here (apptainer is not packaged for Debian 12): its command line."""
    argv = Apptainer(("/images/*.sif",)).run_argv(
        name="fluksio-c1",
        image="/images/tool.sif",
        mounts=[Mount("/cache/runner.py", "/fluksio/runner.py")],
        devices=["/dev/nvidia0:/dev/nvidia0"],
        ram_mb=None,
    )
    assert argv == [
        "apptainer", "exec", "--contain", "--cleanenv", "--env", "PYTHONUNBUFFERED=1",
        "--bind", "/cache/runner.py:/fluksio/runner.py:ro", "--nv", "/images/tool.sif",
        "python3", "/fluksio/runner.py", "call", "0", "3", "4", "5",
    ]  # fmt: skip


async def test_a_call_prefers_the_worker_holding_its_image_and_the_list_shows_it(
    api: InProcessEngine,
) -> None:
    report = ContainersReport(runtime="podman", images=["registry.example/*"])
    cold = await api.attach(
        await api.mint("cold", ["gpu"]), name="cold", labels=["gpu"], containers=report
    )
    warm = await api.attach(
        await api.mint("warm", ["gpu"]), name="warm", labels=["gpu"], containers=report
    )
    await warm.send_raw(json.dumps({"op": "cache", "holds": [f"image:{IMAGE}"]}))

    async def listed() -> dict[str, Any] | None:
        workers = (await api.request("GET", "/workers")).body
        found = {w["name"]: w for w in workers}.get("warm")
        return found if found and found["containers"]["held"] else None

    shown = await poll_async(listed, timeout=10, what="the held image in the worker's entry")
    assert shown["containers"] == {
        "runtime": "podman",
        "allow_images": ["registry.example/*"],
        "held": [IMAGE],
    }
    assert shown["cached_artifacts"] == 0, "an image is not an artifact"
    node = {"id": "n", "code": NODE, "worker": "gpu", "container": {"image": IMAGE}}
    await api.put_flow("warm-first", [node])
    run = await api.start_run("warm-first")
    call = await warm.next_call()
    await warm.answer(call["call_id"], 1)
    done = nodes_of(await api.wait_run(run["id"]))["n"]
    assert done["ran_on"] == "warm", done
    assert cold.greeting["op"] == "welcome"
