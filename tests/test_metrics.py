"""``GET /metrics``: who may scrape it, and what an operator's graphs and alerts read.

The exposition is read back with ``prometheus_client``'s own parser, as Prometheus would
take it; ``test_prometheus.py`` has Debian's real Prometheus server scrape an engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import Gauge
from prometheus_client.parser import text_string_to_metric_families

from fluksio.agent.protocol.frames import PROTOCOL
from fluksio.engine.provisioning import Configured
from fluksio.provisioners import JobState, JobStatus
from fluksio.provisioners.plugins import build_plugins
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.scrape import scrape
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"
FAILS = "def process():\n    raise ValueError('no')\n"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_only_a_superuser_or_a_scrape_token_may_scrape(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    async with api.client.get("/metrics") as answer:
        assert answer.status == 401, "the metrics are never open by default"
    assert (await scrape(api))[0] == 200

    minted = await api.request("POST", "/metrics/tokens", json_body={"name": "prometheus"})
    assert minted.status == 201, minted
    scrape_token = minted.body["token"]
    status, text = await scrape(api, scrape_token)
    assert status == 200 and "fluksio_workers_attached" in text
    listed = (await api.request("GET", "/metrics/tokens")).body
    assert [t["name"] for t in listed] == ["prometheus"]
    assert scrape_token not in str(listed), "a scrape token's text is shown once only"

    # It reads the metrics and nothing else.
    assert (await api.request("GET", "/workers", token=scrape_token)).status == 401
    bad = await api.request("POST", "/metrics/tokens", json_body={"name": "a b"})
    assert bad.status == 422 and "name" in bad.body["detail"]

    revoked = await api.request("POST", f"/metrics/tokens/{minted.body['id']}/revoke")
    assert revoked.body["status"] == "revoked"
    assert (await scrape(api, scrape_token))[0] == 401
    missing = await api.request("POST", "/metrics/tokens/nope/revoke")
    assert missing.status == 404


async def test_calls_workers_and_the_queue_are_counted_with_bounded_labels(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    token = await api.mint("box", ["cpu"])
    worker = await api.attach(token, name="box", labels=["cpu"], cpus=4)
    await api.put_flow("here", [{"id": "n", "code": NODE}])
    await api.put_flow("bad", [{"id": "n", "code": FAILS}])
    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    await api.put_flow("gpu", [{"id": "n", "code": NODE, "worker": "gpu"}])
    ids: list[str] = []
    for flow in ("here", "here", "bad"):
        run = await api.start_run(flow)
        ids.append(run["id"])
        await api.wait_run(run["id"])
    run = await api.start_run("cpu")
    ids.append(run["id"])
    call = await worker.next_call()
    ids.append(call["call_id"])
    await worker.answer(call["call_id"], 1)
    await api.wait_run(run["id"])
    waiting = await api.start_run("gpu")
    ids.append(waiting["id"])

    async with api.client.put(
        "/api/v1/artifacts?name=a.bin",
        data=b"x" * 1000,
        headers={"Authorization": f"Bearer {api.token}"},
    ) as answer:
        assert answer.status == 201
        digest = (await answer.json())["digest"]
    async with api.client.get(
        f"/api/v1/artifacts/{digest}", headers={"Authorization": f"Bearer {api.token}"}
    ) as answer:
        assert len(await answer.read()) == 1000

    status, text = await scrape(api)
    assert status == 200
    found = samples(text)
    calls = "fluksio_node_calls_total"
    assert value(found, calls, place="engine", outcome="succeeded") == 2
    assert value(found, calls, place="engine", outcome="failed") == 1
    assert value(found, calls, place="worker", outcome="succeeded") == 1
    assert value(found, "fluksio_node_call_duration_seconds_count", place="engine") == 3
    assert value(found, "fluksio_node_call_queue_wait_seconds_count", place="worker") == 1
    assert value(found, "fluksio_calls_waiting", label="gpu") == 1
    assert (
        value(
            found, "fluksio_workers_attached", label="cpu", version="test", protocol=str(PROTOCOL)
        )
        == 1
    )
    assert value(found, "fluksio_websocket_frames_total", direction="in") >= 2
    assert value(found, "fluksio_websocket_frames_total", direction="out") >= 2
    assert value(found, "fluksio_artifact_bytes_total", direction="in") == 1000
    assert value(found, "fluksio_artifact_bytes_total", direction="out") == 1000

    label_values = {v for (_name, labels) in found for _k, v in labels}
    secrets = {token, api.token, *ids, worker.greeting.get("name", "")} - {"box"}
    assert not label_values & secrets, "an id or a token became a label value"

    await api.request("POST", f"/runs/{waiting['id']}/cancel")
    await worker.close()

    async def settled() -> bool:
        again = samples((await scrape(api))[1])
        return value(again, "fluksio_calls_waiting", label="gpu") == 0 and not any(
            n == "fluksio_workers_attached" and v for (n, _l), v in again.items()
        )

    await poll_async(settled, timeout=10, what="the gauges to follow the engine")


async def test_provisioning_is_counted_by_provisioner_profile_and_stage(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    provisioner = Scripted(scripted_settings(provision_timeout_s=600))
    clock = ManualClock()
    api = await start_in_process(
        aiohttp_client,
        tmp_path / "data",
        provisioners=Configured(build_plugins(), [provisioner]),
        clock=clock,
    )
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    run = await api.start_run("hpc")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")

    box = {"provisioner": "box", "profile": "small"}

    async def queued() -> bool:
        found = samples((await scrape(api))[1])
        return value(found, "fluksio_provisioning_requests", stage="queued", **box) == 1

    await poll_async(queued, timeout=10, what="the request counted as queued")
    found = samples((await scrape(api))[1])
    assert value(found, "fluksio_provisioning_submissions_total", **box) == 1

    provisioner.jobs["100"] = JobStatus(JobState.RUNNING, "RUNNING")
    clock.advance(30)
    worker = await api.attach(provisioner.tokens[0], name="box-small", labels=["hpc"])
    call = await worker.next_call()
    await worker.answer(call["call_id"], 1)
    assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    found = samples((await scrape(api))[1])
    histogram = "fluksio_provisioning_submit_to_attach_seconds"
    assert value(found, f"{histogram}_count", **box) == 1
    assert value(found, f"{histogram}_sum", **box) == 30
    await worker.close()


async def test_a_metric_name_used_twice_is_refused_when_it_is_registered(
    api: InProcessEngine,
) -> None:
    # The families read at each scrape are described up front: a clash with one of them
    # fails where it is made, not at a scrape, where the whole exposition would fail.
    registry = api.engine.metrics.registry
    with pytest.raises(ValueError, match="fluksio_calls_waiting"):
        Gauge("fluksio_calls_waiting", "a second family of the same name", registry=registry)
    status, text = await scrape(api)
    assert status == 200
    assert "# TYPE fluksio_calls_waiting gauge" in text, "the engine's own family still scrapes"
