"""Compute nodes with no route out: the engine behind an air gap, its jobs' workers coming
in through the login node.

The engine runs in a network namespace, listening only on that namespace's loopback, with
a certificate for ``engine.example`` from a private CA. It reaches the login node (the
local Slurm's sshd, in the root namespace) over a veth pair; Slurm runs its jobs in the
root namespace, where nothing can open a connection to the engine. A ``"route":
"direct"`` job's worker therefore cannot attach, and a ``"route": "login"`` job's worker
comes in through the relay the engine keeps on the login node, TLS verified end to end.
The same holds for a Grid Engine cell's jobs and for an SSH host (``"type": "ssh"``) with
no route out, whose worker dials its own loopback.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fluksio.provisioners.login_route import RELAY_SILENCE_S
from tests.support.certs import CertificateAuthority
from tests.support.engine import BIN, EngineProcess, start_engine, write_provisioners
from tests.support.netns import AirGap, air_gap
from tests.support.proxy import PausableProxy
from tests.support.relay import relay_pids
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.slurm import LocalSlurm, local_gridengine, local_slurm
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

ENGINE_PORT = 8443  # the namespace is new: every port in it is free
MAKE = code("""
    import fluksio
    def process():
        return fluksio.save_artifact(b"from the engine " * 65536, name="in.bin")
""")
USE = code("""
    import fluksio, os, time
    def process(make):
        with open(fluksio.load_artifact(make), "rb") as came:
            data = came.read()
        time.sleep(float(os.environ.get("FLUKSIO_TEST_PAUSE", "0")))
        back = fluksio.save_artifact(data[::-1], name="out.bin")
        return {"size": len(data), "back": back, "job": os.environ.get("SLURM_JOB_ID")}
""")


@dataclass
class Gap:
    gap: AirGap
    engine: EngineProcess
    admin: str
    ssh: PausableProxy
    """The engine's only way to the login node's sshd: cut, it drops the engine's SSH."""
    relay_port: int | None = None


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture(params=["asyncssh", "openssh"])
def gapped(request: pytest.FixtureRequest, tmp_path: Path, slurm: LocalSlurm) -> Iterator[Gap]:
    """The gap, with the engine's SSH spoken by each transport in turn."""
    with _gapped(tmp_path, slurm, request.param) as started:
        yield started


@pytest.fixture
def gapped_once(tmp_path: Path, slurm: LocalSlurm) -> Iterator[Gap]:
    """The gap with the engine's SSH spoken by asyncssh only."""
    with _gapped(tmp_path, slurm, "asyncssh") as started:
        yield started


@contextlib.contextmanager
def _gapped(tmp_path: Path, slurm: LocalSlurm, transport: str) -> Iterator[Gap]:
    with air_gap() as gap:
        ssh = PausableProxy(slurm.port, listen_host=gap.outside)
        engine: EngineProcess | None = None
        try:
            started = _start(tmp_path, slurm, gap, ssh, transport)
            engine = started.engine
            yield started
        finally:
            if engine is not None:
                engine.stop()
            ssh.close()


def _start(
    tmp_path: Path, slurm: LocalSlurm, gap: AirGap, ssh: PausableProxy, transport: str
) -> Gap:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("engine", ["engine.example", "127.0.0.1"])
    known = tmp_path / "known_hosts"
    host_key = Path(slurm.known_hosts).read_text().split("\n")[0].split(" ", 1)[1]
    known.write_text(f"[{gap.outside}]:{ssh.port} {host_key}\n")
    login = f"{slurm.login}".split("@")[0] + f"@{gap.outside}:{ssh.port}"
    common: dict[str, Any] = {
        "type": "slurm",
        "transport": transport,
        "login": login,
        "ssh_key": slurm.key,
        "known_hosts": str(known),
        "worker_command": slurm.worker,
        "ca_file": str(ca.pem),
        "max_idle_s": 120,
        "provision_timeout_s": 600,
        "poll_interval_s": 0.5,
    }
    profile = {"name": "small", "cpus": 1, "ram_mb": 300}
    data_dir = tmp_path / "data"
    write_provisioners(
        data_dir,
        [
            {
                **common,
                "name": "direct",
                # The engine's address on the pair: it listens only on its loopback.
                "engine_url": f"wss://{gap.inside}:{ENGINE_PORT}/api/v1/workers/attach",
                "profiles": [{**profile, "labels": ["direct"]}],
            },
            {
                **common,
                "name": "gap",
                "route": "login",
                "login_address": "127.0.0.1",  # the login node as the compute nodes see it
                "engine_url": f"wss://engine.example:{ENGINE_PORT}/api/v1/workers/attach",
                "profiles": [{**profile, "labels": ["gap"]}],
            },
            {
                **common,
                "type": "gridengine",
                "name": "ge-gap",
                "route": "login",
                "login_address": "127.0.0.1",
                "engine_url": f"wss://engine.example:{ENGINE_PORT}/api/v1/workers/attach",
                "parallel_environment": local_gridengine().parallel_environment,
                "profiles": [{"name": "small", "walltime_s": 600, "labels": ["ge-gap"]}],
            },
            {
                **{key: value for key, value in common.items() if key != "login"},
                "type": "ssh",
                "name": "host-gap",
                "route": "login",
                "engine_url": f"wss://engine.example:{ENGINE_PORT}/api/v1/workers/attach",
                "hosts": [{"name": "box", "login": login, "labels": ["host-gap"]}],
            },
        ],
    )
    engine = start_engine(
        data_dir,
        tmp_path / "logs",
        port=ENGINE_PORT,
        args=("--tls-cert", str(pair.cert), "--tls-key", str(pair.key)),
        netns=gap.name,
        ca_file=str(ca.pem),
    )
    return Gap(gap, engine, engine.login(), ssh)


def _profile(gapped: Gap, name: str) -> dict[str, Any]:
    answer = gapped.engine.client(gapped.admin).request("GET", "/workers/resources")
    (provisioner,) = [p for p in answer.body["provisioners"] if p["name"] == name]
    (profile,) = provisioner["profiles"]
    view: dict[str, Any] = profile
    return view


def _flow(label: str, use: str) -> list[dict[str, Any]]:
    """An artifact made on the engine, used on a worker labelled ``label``, sent back."""
    return [
        {"id": "make", "code": MAKE},
        {"id": "use", "worker": label, "after": ["make"], "code": use},
    ]


def _check_ssh(gapped: Gap) -> str:
    """What ``fluksio provisioners check --ssh`` says, run inside the gap."""
    checked = subprocess.run(
        [*gapped.gap.prefix(), str(BIN / "fluksio"), "provisioners", "check", "--ssh",
         "--data-dir", str(gapped.engine.data_dir)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    return checked.stdout


def _job_output(slurm: LocalSlurm, job_id: str) -> str:
    return slurm.ssh("cat", f"slurm-{job_id}.out").stdout


def test_a_direct_job_cannot_attach_and_says_why(gapped: Gap, slurm: LocalSlurm) -> None:
    run_id = run_flow(gapped.engine, gapped.admin, "direct", _flow("direct", USE))
    job = wait_for(
        lambda: [j["job_id"] for j in _profile(gapped, "direct")["jobs"] if j["job_id"]],
        timeout=60,
        what="the direct profile's job",
    )[0]

    def complaint() -> str | None:
        said = _job_output(slurm, job)
        return said if "cannot reach the engine" in said else None

    said = wait_for(
        complaint,
        timeout=90,
        what="the job's worker to say it cannot reach the engine",
    )
    where = f"wss://{gapped.gap.inside}:{ENGINE_PORT}/api/v1/workers/attach"
    assert f"cannot reach the engine at {where}: connection refused (" in said, said
    assert nodes_of(get_run(gapped.engine, gapped.admin, run_id))["use"]["state"] == "queued"


def test_a_login_routed_job_runs_through_ssh_drops_and_leaves_nothing_after_sigkill(
    gapped: Gap, slurm: LocalSlurm, tmp_path: Path
) -> None:
    engine, admin = gapped.engine, gapped.admin
    run_id = run_flow(engine, admin, "gap", _flow("gap", USE))
    run = wait_run(engine, admin, run_id, timeout=180)
    use = nodes_of(run)["use"]
    assert run["state"] == "succeeded", use
    assert use["result"]["size"] == 16 * 65536 and use["result"]["back"]["name"] == "out.bin"
    assert use["result"]["job"], "ran in a Slurm job"
    back = engine.client(admin).request("GET", f"/artifacts/{use['result']['back']['digest']}")
    assert back.body == (b"from the engine " * 65536)[::-1], "the worker's upload, whole"
    assert _profile(gapped, "gap")["path_down"] is None

    # provisioners check --ssh shows the relay the engine keeps on the login node.
    checked = _check_ssh(gapped)
    port = (engine.data_dir / "provisioners" / "gap" / "route-port").read_text().strip()
    assert f"route: login; jobs' workers connect to 127.0.0.1:{port}" in checked
    assert "relay: running (pid " in checked
    (relay,) = relay_pids("gap")

    # The engine's SSH connection dropped mid-call: the call still finishes.
    run_id = run_flow(engine, admin, "gap-slow", _flow("gap", USE.replace('"0"', '"12"')))
    wait_for(
        lambda: nodes_of(get_run(engine, admin, run_id))["use"]["state"] == "running",
        timeout=60,
        what="the slow call to run",
    )
    gapped.ssh.cut()
    wait_for(lambda: relay not in relay_pids("gap"), timeout=30, what="the old relay to end")
    run = wait_run(engine, admin, run_id, timeout=120)
    assert run["state"] == "succeeded", nodes_of(run)["use"]["error"]
    (relay,) = wait_for(lambda: relay_pids("gap"), timeout=30, what="the path built again")

    # SIGKILL: nothing of ours is left on the login node within the stated bound.
    engine.stop(signal.SIGKILL)
    wait_for(
        lambda: not relay_pids("gap"),
        timeout=RELAY_SILENCE_S + 5,
        what="the relay to end after the engine was killed",
    )


def test_a_grid_engine_job_and_an_ssh_host_with_no_route_out_come_in_through_their_ssh(
    gapped_once: Gap,
) -> None:
    engine, admin = gapped_once.engine, gapped_once.admin
    flow = [
        *_flow("ge-gap", USE),
        {"id": "host", "worker": "host-gap", "after": ["make"], "code": USE},
    ]
    run = wait_run(engine, admin, run_flow(engine, admin, "both", flow), timeout=180)
    nodes = nodes_of(run)
    assert run["state"] == "succeeded", {n: nodes[n]["error"] for n in ("use", "host")}
    for node in ("use", "host"):
        assert nodes[node]["result"]["size"] == 16 * 65536, nodes[node]
    assert nodes["use"]["provenance"]["batch_job"].startswith("Grid Engine job ")
    assert nodes["host"]["provenance"]["provisioner"] == "host-gap/box"
    assert _profile(gapped_once, "ge-gap")["path_down"] is None
    assert relay_pids("ge-gap") and relay_pids("host-gap"), "each kept its own relay"

    # The host's relay listens on its loopback only: nothing else there reaches it.
    checked = _check_ssh(gapped_once)
    state = engine.data_dir / "provisioners"
    ge_port = (state / "ge-gap" / "route-port").read_text().strip()
    host_port = (state / "host-gap" / "route-port-box").read_text().strip()
    assert f"route: login; jobs' workers connect to 127.0.0.1:{ge_port}" in checked
    assert f"route: login; its worker connects to 127.0.0.1:{host_port} there" in checked
    listening = subprocess.run(
        ["ss", "-Htln", f"sport = :{host_port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert f"127.0.0.1:{host_port}" in listening, listening
