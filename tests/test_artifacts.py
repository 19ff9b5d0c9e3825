"""Artifacts across machines: saved on one worker, loaded on another, cached, verified."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import socket
from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import StoreOffer
from fluksio.agent.shared_store import shared_store_env
from tests.support.engine import EngineProcess, start_engine
from tests.support.inprocess import InProcessEngine
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.wait import async_wait_for, wait_for
from tests.support.worker import WorkerProcess, start_labelled_worker, start_worker

FIFTY_MB = 50 * 1024 * 1024


def artifact_gets(engine: EngineProcess) -> int:
    count = 0
    for line in engine.logs().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            entry.get("event") == "http.request"
            and entry.get("method") == "GET"
            and str(entry.get("path", "")).startswith("/api/v1/artifacts/")
        ):
            count += 1
    return count


def attach(
    engine: EngineProcess,
    admin: str,
    tmp_path: Path,
    name: str,
    label: str,
    *,
    cache_bytes: int | None = None,
    transport: str = "http",
) -> WorkerProcess:
    token = engine.mint(admin, name, [label])["token"]
    env = {"FLUKSIO_ARTIFACT_CACHE": str(tmp_path / f"cache-{name}")}
    if cache_bytes is not None:
        env["FLUKSIO_ARTIFACT_CACHE_BYTES"] = str(cache_bytes)
    worker = start_worker(
        engine,
        token,
        tmp_path / name,
        "--labels",
        label,
        "--name",
        "h",
        "--artifact-transport",
        transport,
        env=env,
    )
    wait_for(
        lambda: any(
            w["name"] == f"{name}/h" for w in engine.client(admin).request("GET", "/workers").body
        ),
        timeout=30,
        what=f"{name} to attach",
    )
    return worker


SAVE_50MB = code("""
    import hashlib, os, fluksio
    def process():
        data = os.urandom(50 * 1024 * 1024)
        ref = fluksio.save_artifact(data, name="blob.bin")
        return {"ref": ref, "sha": hashlib.sha256(data).hexdigest()}
""")
LOAD = code("""
    import hashlib, fluksio
    def process(make):
        path = fluksio.load_artifact(make["ref"])
        first = hashlib.sha256(open(path, "rb").read()).hexdigest()
        again = fluksio.load_artifact(make["ref"]["digest"])
        return {"sha": first, "same_path": again == path, "path": path}
""")


def test_saved_on_one_worker_loaded_on_another_then_from_the_cache(
    engine: EngineProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    admin = engine.login()
    workers.append(attach(engine, admin, tmp_path, "maker", "make"))
    workers.append(attach(engine, admin, tmp_path, "user", "use"))
    run_id = run_flow(
        engine,
        admin,
        "art",
        [
            {"id": "make", "worker": "make", "code": SAVE_50MB},
            {"id": "use", "worker": "use", "after": ["make"], "code": LOAD},
            {
                "id": "use_again",
                "worker": "use",
                "after": ["use", "make"],
                "code": LOAD.replace("def process(make):", "def process(make, use):"),
            },
        ],
    )
    run = wait_run(engine, admin, run_id, timeout=120)
    assert run["state"] == "succeeded", run
    by_id = nodes_of(run)
    made = by_id["make"]["result"]
    assert made["ref"]["size"] == FIFTY_MB and made["ref"]["name"] == "blob.bin"
    assert by_id["use"]["result"]["sha"] == made["sha"] == made["ref"]["digest"].split(":")[1]
    assert by_id["use"]["result"]["same_path"] is True
    assert by_id["use"]["ran_on"] == "user/h" and by_id["make"]["ran_on"] == "maker/h"
    assert by_id["use_again"]["result"]["sha"] == made["sha"]
    assert artifact_gets(engine) == 1, "fetched once; every later load came from the cache"
    assert [a["digest"] for a in run["artifacts"]] == [made["ref"]["digest"]]
    assert (engine.data_dir / "artifacts" / "sha256" / made["sha"][:2] / made["sha"]).exists()


def test_the_cache_is_bounded_and_a_corrupted_entry_is_fetched_again(
    engine: EngineProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    admin = engine.login()
    workers.append(attach(engine, admin, tmp_path, "small", "small", cache_bytes=3_000_000))
    refs = []
    for index in range(6):
        data = bytes([index]) * 1_000_000
        answer = engine.client(admin).request("PUT", f"/artifacts?name=p{index}", data=data)
        assert answer.status == 201
        refs.append(answer.body)
    load_all = code("""
        import fluksio
        def process(refs):
            return [fluksio.load_artifact(ref) for ref in refs]
    """)
    engine.client(admin).request(
        "PUT",
        "/flows/many",
        json_body={
            "nodes": [{"id": "load", "worker": "small", "params": {"refs": refs}, "code": load_all}]
        },
    )
    run = engine.client(admin).request("POST", "/flows/many/runs", json_body={}).body
    paths = nodes_of(wait_run(engine, admin, run["id"]))["load"]["result"]
    cache = tmp_path / "cache-small" / "sha256"
    total = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert total <= 3_000_000, "the bound holds"
    assert Path(paths[-1]).exists(), "the newest entry is kept"

    newest = Path(paths[-1])
    newest.write_bytes(b"\x00" * newest.stat().st_size)  # same size, wrong bytes
    before = artifact_gets(engine)
    check = code("""
        import fluksio
        def process(ref):
            return open(fluksio.load_artifact(ref), "rb").read(3).hex()
    """)
    run_id = run_flow(
        engine,
        admin,
        "check",
        [{"id": "check", "worker": "small", "params": {"ref": refs[-1]}, "code": check}],
    )
    assert nodes_of(wait_run(engine, admin, run_id))["check"]["result"] == "050505"
    assert artifact_gets(engine) == before + 1, "the corrupted entry was fetched again"


async def test_uploads_that_do_not_match_or_end_early_leave_nothing(
    api: InProcessEngine, tmp_path: Path
) -> None:
    data = b"the real bytes"
    headers = {"Authorization": f"Bearer {api.token}"}
    claimed = {**headers, "X-Fluksio-Digest": "sha256:" + "0" * 64}
    async with api.client.put("/api/v1/artifacts?name=x", data=data, headers=claimed) as wrong:
        body = await wrong.json()
        assert wrong.status == 422 and "nothing was stored" in body["detail"]
        assert body["field"] == "X-Fluksio-Digest"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await api.request("HEAD", f"/artifacts/{digest}")).status == 404
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        f"PUT /api/v1/artifacts?name=t HTTP/1.1\r\nHost: x\r\nAuthorization: "
        f"Bearer {api.token}\r\nContent-Length: 1000\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    del reader
    temporary = tmp_path / "data" / "artifacts" / "tmp"
    await async_wait_for(
        lambda: not list(temporary.iterdir()), timeout=10, what="the partial upload to be dropped"
    )
    assert (await api.request("GET", f"/artifacts/{digest}")).status == 404
    bad = await api.request("GET", "/artifacts/sha256:../../etc/passwd")
    assert bad.status in (404, 422)
    malformed = await api.request("GET", "/artifacts/md5:abc")
    assert malformed.status == 422 and malformed.body["field"] == "digest"


async def test_revoking_a_worker_token_blocks_its_artifacts_at_once(api: InProcessEngine) -> None:
    worker = (
        await api.request("POST", "/workers/tokens", json_body={"name": "art", "labels": ["x"]})
    ).body
    token = worker["token"]
    async with api.client.put(
        "/api/v1/artifacts?name=a", data=b"abc", headers={"Authorization": f"Bearer {token}"}
    ) as stored:
        assert stored.status == 201
        digest = (await stored.json())["digest"]
    assert (await api.request("GET", f"/artifacts/{digest}", token=token)).status == 200
    await api.request("POST", f"/workers/tokens/{worker['jti']}/revoke")
    for method in ("GET", "HEAD"):
        assert (await api.request(method, f"/artifacts/{digest}", token=token)).status == 401
    assert (await api.request("PUT", "/artifacts", token=token)).status == 401
    assert (await api.request("GET", f"/artifacts/{digest}", token="")).status == 401


@pytest.mark.process
def test_an_engine_killed_during_an_upload_serves_no_partial_object(tmp_path: Path) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs1")
    admin = engine.login()
    host, port = engine.url.removeprefix("http://").split(":")
    raw = socket.create_connection((host, int(port)))
    raw.sendall(
        f"PUT /api/v1/artifacts?name=big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        f"{admin}\r\nContent-Length: 100000000\r\n\r\n".encode()
        + b"z" * 5_000_000
    )
    wait_for(
        lambda: list((engine.data_dir / "artifacts" / "tmp").iterdir()),
        timeout=10,
        what="the upload to be under way",
    )
    engine.stop(signal.SIGKILL)
    raw.close()
    again = start_engine(tmp_path / "data", tmp_path / "logs2")
    try:
        objects = [p for p in (again.data_dir / "artifacts" / "sha256").rglob("*") if p.is_file()]
        assert objects == []
        assert list((again.data_dir / "artifacts" / "tmp").iterdir()) == []
    finally:
        again.stop()


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


def test_two_gib_cross_machines_without_ever_being_held_in_memory(
    engine: EngineProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    admin = engine.login()
    maker = attach(engine, admin, tmp_path, "big-maker", "bigmake")
    user = attach(engine, admin, tmp_path, "big-user", "biguse")
    workers += [maker, user]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    peak = code("""
        def peak_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    """)
    run_id = run_flow(
        engine,
        admin,
        "big",
        [
            {
                "id": "make",
                "worker": "bigmake",
                "code": peak
                + code(f"""
            import hashlib, os, fluksio
            def process():
                path = os.path.join({str(scratch)!r}, "two-gib.bin")
                block = os.urandom(1 << 20)
                with open(path, "wb") as out:
                    for _ in range(2048):
                        out.write(block)
                ref = fluksio.save_artifact(path)
                os.unlink(path)
                return {{"ref": ref, "peak_mb": peak_mb()}}
        """),
            },
            {
                "id": "use",
                "worker": "biguse",
                "after": ["make"],
                "code": peak
                + code("""
            import os, fluksio
            def process(make):
                path = fluksio.load_artifact(make["ref"])
                return {"size": os.path.getsize(path), "peak_mb": peak_mb()}
        """),
            },
        ],
    )
    run = wait_run(engine, admin, run_id, timeout=300)
    assert run["state"] == "succeeded", run
    by_id = nodes_of(run)
    assert by_id["make"]["result"]["ref"]["size"] == 2 << 30
    assert by_id["use"]["result"]["size"] == 2 << 30
    limit = 150
    assert by_id["make"]["result"]["peak_mb"] < limit, "the saving node streamed it"
    assert by_id["use"]["result"]["peak_mb"] < limit, "the loading node streamed it"
    assert _peak_rss_mb(engine.pid) < limit, "the engine streamed it both ways"
    for agent in (maker, user):
        assert _peak_rss_mb(agent.pid) < limit, "the agents never touched the bytes"


def artifact_puts(engine: EngineProcess) -> int:
    return sum(
        1
        for line in engine.logs().splitlines()
        if '"method": "PUT"' in line and '"/api/v1/artifacts"' in line
    )


def test_a_worker_sharing_the_engines_filesystem_uses_the_store_directly(
    engine: EngineProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    admin = engine.login()
    worker = attach(engine, admin, tmp_path, "neighbour", "near", transport="auto")
    workers.append(worker)
    run_id = run_flow(
        engine,
        admin,
        "near",
        [
            {
                "id": "save",
                "worker": "near",
                "code": code("""
            import fluksio
            def process():
                return fluksio.save_artifact(b"written in place", name="n.txt")
        """),
            },
            {
                "id": "load",
                "worker": "near",
                "after": ["save"],
                "code": code("""
            import fluksio
            def process(save):
                return [fluksio.load_artifact(save), open(fluksio.load_artifact(save)).read()]
        """),
            },
        ],
    )
    run = wait_run(engine, admin, run_id)
    assert run["state"] == "succeeded", run
    path, text = nodes_of(run)["load"]["result"]
    assert text == "written in place"
    assert path.startswith(str(engine.data_dir / "artifacts" / "sha256"))
    assert artifact_puts(engine) == 0 and artifact_gets(engine) == 0, "no HTTP at all"
    assert "shares the engine's artifact store" in worker.logs()


def test_the_shared_store_is_never_assumed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "sha256").mkdir(parents=True)
    (store / "probes").mkdir()
    (store / "probes" / "w1").write_text("right")
    offered = StoreOffer(path=str(store), probe="probes/w1", nonce="right")
    assert shared_store_env(offered) == {"FLUKSIO_ARTIFACT_DIR": str(store)}
    for claim in (
        StoreOffer(path=str(store), probe="probes/w1", nonce="wrong"),
        StoreOffer(path=str(store), probe="probes/missing", nonce="right"),
        StoreOffer(path=str(store), probe="../outside", nonce="right"),
        StoreOffer(path=str(tmp_path / "elsewhere"), probe="probes/w1", nonce="right"),
        StoreOffer(path=str(store), probe="probes/w1", nonce=""),
        None,
    ):
        assert shared_store_env(claim) == {}, claim


def test_concurrent_loads_fetch_once_and_the_same_bytes_upload_once(
    engine: EngineProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    admin = engine.login()
    worker = start_labelled_worker(
        engine,
        admin,
        "busy",
        tmp_path / "busy",
        "--name",
        "h",
        "--parallel",
        "3",
        "--artifact-transport",
        "http",
        env={"FLUKSIO_ARTIFACT_CACHE": str(tmp_path / "c")},
    )
    workers.append(worker)
    # The bytes are made on another machine (a cache of its own): what a call saves is
    # kept in its own machine's cache, and read there without a fetch.
    workers.append(attach(engine, admin, tmp_path, "maker", "maker"))
    save_twice = code("""
        import fluksio
        def process():
            data = b"x" * (20 * 1024 * 1024)
            return [fluksio.save_artifact(data, name="a"), fluksio.save_artifact(data, name="b")]
    """)
    load = code("""
        import fluksio, hashlib
        def process(save):
            return hashlib.sha256(open(fluksio.load_artifact(save[0]), "rb").read()).hexdigest()
    """)
    run_id = run_flow(
        engine,
        admin,
        "crowd",
        [
            {"id": "save", "worker": "maker", "code": save_twice},
            *[
                {"id": f"load{i}", "worker": "busy", "after": ["save"], "code": load}
                for i in range(3)
            ],
        ],
    )
    run = wait_run(engine, admin, run_id, timeout=120)
    assert run["state"] == "succeeded", run
    by_id = nodes_of(run)
    assert by_id["save"]["result"][0]["digest"] == by_id["save"]["result"][1]["digest"]
    assert artifact_puts(engine) == 1, "the second save found the bytes already there"
    starts = sorted(by_id[f"load{i}"]["started_at"] for i in range(3))
    ends = sorted(by_id[f"load{i}"]["ended_at"] for i in range(3))
    assert starts[-1] < ends[0], "the three loads ran at the same time"
    assert len({by_id[f"load{i}"]["result"] for i in range(3)}) == 1
    assert artifact_gets(engine) == 1, "three concurrent loads, one fetch"
