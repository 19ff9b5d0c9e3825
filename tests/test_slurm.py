"""The Slurm provisioner end to end: a real engine, real OpenSSH, a real Slurm on 127.0.0.1.

Each test writes a provisioners.json whose profile runs the fluksio-worker that
``make slurm-up`` installed for the (unprivileged) job user, starts an engine, and watches
what a user would: the run, ``GET /workers/resources``, and ``squeue`` on the login node.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.certs import CertificateAuthority
from tests.support.runs import code, get_run, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import (
    NODE,
    check_ssh,
    no_job_outlives_its_test,
    profile_view,
    resources_of,
    short_partition,
    slurm,
    start,
    wait_error,
)
from tests.support.transports import both_transports
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


@both_transports
def test_a_node_for_hpc_brings_a_job_whose_worker_runs_it_then_leaves(
    start: Any, slurm: LocalSlurm, kind: str
) -> None:
    engine, token = start(transport=kind)
    assert put_flow(engine, token, "on-hpc", [{"id": "n", "worker": "hpc", "code": NODE}])
    run_id = start_run(engine, token, "on-hpc")["id"]

    def submission() -> dict[str, Any] | None:
        outstanding: dict[str, Any] | None = profile_view(engine, token)["outstanding"]
        return outstanding if outstanding and outstanding["job_id"] else None

    outstanding = wait_for(submission, timeout=30, what="a Slurm job to be submitted")
    submitted = outstanding["job_id"]
    run = wait_run(engine, token, run_id, timeout=90)
    assert run["state"] == "succeeded", run
    (node,) = run["nodes"]
    assert node["result"] == {"job": submitted, "user": slurm.login.split("@")[0]}
    # Where it ran: the job, the host, and the request that brought the worker.
    assert node["provenance"] == {
        "worker": "hpc-small",
        "host": socket.gethostname(),
        "slurm_job_id": submitted,
        "batch_job": f"Slurm job {submitted}",
        "gpu_ids": [],
        "provisioner": "hpc/small",
        "request_id": outstanding["request_id"],
        "cached_bytes": 0,
    }
    profile = profile_view(engine, token)
    assert profile["last_error"] is None
    # The worker idles out (max_idle_s=2), the job completes, its token is revoked.
    completed = wait_for(
        lambda: slurm.job_state(submitted) == "COMPLETED",
        timeout=60,
        what=f"Slurm job {submitted} to complete after its worker idled out",
    )
    assert completed
    wait_for(
        lambda: not profile_view(engine, token)["jobs"],
        timeout=30,
        what="the ended job to leave /workers/resources",
    )
    tokens = engine.client(token).request("GET", "/workers/tokens").body
    brought = [t for t in tokens if t["name"] == "hpc-small"]
    assert len(brought) == 1 and brought[0]["status"] == "revoked", brought
    # The token was in none of the places a user on the cluster, or the logs, could see.
    shown = slurm.ssh("scontrol", "show", "job", "-dd", submitted).stdout
    shown += slurm.ssh("squeue", "-h", "-t", "all", "-o", "%all").stdout
    shown += engine.logs() + engine.stdout()
    assert not re.search(r"eyJ[\w-]{10,}\.eyJ", shown)
    token_file = f".fluksio/tokens/{outstanding['request_id']}"
    assert slurm.ssh("test", "-e", token_file).returncode == 1, "the job left its token file"
    # What an operator graphs: the submission, its time to attach, and the SSH commands.
    scraped = engine.client(token).request("GET", "//metrics").body.decode()
    families = {family.name: family for family in text_string_to_metric_families(scraped)}
    box = {"provisioner": "hpc", "profile": "small"}
    (submitted_total,) = [
        s.value for s in families["fluksio_provisioning_submissions"].samples if s.labels == box
    ]
    assert submitted_total == 1
    attached = families["fluksio_provisioning_submit_to_attach_seconds"].samples
    assert [s.value for s in attached if s.name.endswith("_count") and s.labels == box] == [1]
    ssh = families["fluksio_ssh_command_duration_seconds"].samples
    sbatch = {"provisioner": "hpc", "program": "fluksio-submit", "outcome": "reached"}
    assert [s.value for s in ssh if s.name.endswith("_count") and s.labels == sbatch] == [1]
    polls = {"provisioner": "hpc", "program": "squeue", "outcome": "reached"}
    assert next(s.value for s in ssh if s.name.endswith("_count") and s.labels == polls) >= 1


ARTIFACT_NODE = code(
    """
    import fluksio

    def process():
        ref = fluksio.save_artifact(b"from the cluster " * 100, name="c.bin")
        with open(fluksio.load_artifact(ref), "rb") as back:
            return {"size": len(back.read()), "digest": ref["digest"]}
    """
)


def test_a_job_trusts_the_engines_private_ca_from_ca_file_over_wss(
    start: Any, slurm: LocalSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.pem))  # this test's own REST calls
    engine, token = start(tls=ca.issue("engine", ["127.0.0.1"]), ca_file=str(ca.pem))
    assert engine.api.startswith("https://")
    nodes = [{"id": "n", "worker": "hpc", "code": ARTIFACT_NODE}]
    assert put_flow(engine, token, "tls", nodes)
    run = wait_run(engine, token, start_run(engine, token, "tls")["id"], timeout=90)
    assert run["state"] == "succeeded", run
    (node,) = run["nodes"]
    assert node["result"]["size"] == len(b"from the cluster " * 100)
    assert node["provenance"]["slurm_job_id"], "it ran in a Slurm job"
    shown = slurm.ssh("scontrol", "show", "job", "-dd", node["provenance"]["slurm_job_id"])
    assert "BEGIN CERTIFICATE" not in shown.stdout, "the script names the CA, never holds it"
    copied = slurm.ssh("cat", ".fluksio/ca/hpc.pem").stdout
    assert copied == ca.pem.read_text()


@both_transports
def test_many_queued_calls_still_make_one_job_and_stopping_the_engine_cancels_it(
    start: Any, slurm: LocalSlurm, kind: str, tmp_path: Path
) -> None:
    # Held for an hour: it stays PENDING (BeginTime) however long the test looks at it.
    engine, token = start(
        transport=kind, provision_timeout_s=0, profile={"sbatch": ["--begin=now+1hour"]}
    )
    nodes = [{"id": f"n{i}", "worker": "hpc", "code": NODE} for i in range(4)]
    assert put_flow(engine, token, "many", nodes)
    runs = [start_run(engine, token, "many")["id"] for _ in range(3)]

    def pending() -> dict[str, Any] | None:
        outstanding = profile_view(engine, token)["outstanding"]
        return outstanding if outstanding and outstanding["state"] == "PENDING" else None

    outstanding = wait_for(pending, timeout=30, what="the job to be PENDING")
    job_id = outstanding["job_id"]
    assert outstanding["reason"] == "BeginTime"
    run = get_run(engine, token, runs[-1])
    assert run["state"] == "queued"
    assert run["reason"] == f"provisioning hpc/small, Slurm job {job_id} PENDING (BeginTime)"
    queued = resources_of(engine, token)["queued"]
    assert len(queued) == 12 and {q["reason"] for q in queued} == {run["reason"]}
    assert slurm.fluksio_jobs(tmp_path) == [job_id]
    assert len(profile_view(engine, token)["jobs"]) == 1

    assert engine.stop() == 0
    assert slurm.job_state(job_id) == "CANCELLED"
    assert slurm.fluksio_jobs(tmp_path) == []


def test_a_job_that_never_starts_is_cancelled_after_provision_timeout(
    start: Any, slurm: LocalSlurm
) -> None:
    engine, token = start(provision_timeout_s=2, profile={"sbatch": ["--hold"]})
    assert put_flow(engine, token, "held", [{"id": "n", "worker": "hpc", "code": NODE}])
    run_id = start_run(engine, token, "held")["id"]

    error = wait_error(engine, token, "the held job to time out")
    found = re.fullmatch(r"Slurm job (\d+) did not attach within 2 s; cancelled", error["message"])
    assert found, error
    assert slurm.job_state(found.group(1)) == "CANCELLED"
    view = profile_view(engine, token)
    assert view["outstanding"] is None and view["retry_at"] is not None
    reason = get_run(engine, token, run_id)["reason"]
    assert reason.startswith(
        f"provisioning hpc/small, the last attempt failed ({error['message']})"
    )


@both_transports
def test_sbatch_refusing_the_profile_is_shown_with_slurms_words(
    start: Any, slurm: LocalSlurm, kind: str, tmp_path: Path
) -> None:
    # A generic resource the cluster lacks: only sbatch can say so (a partition it lacks is
    # refused before any submission: tests/test_slurm_site_limits.py).
    engine, token = start(transport=kind, profile={"sbatch": ["--gres=no-such:1"]})
    assert put_flow(engine, token, "nowhere", [{"id": "n", "worker": "hpc", "code": NODE}])
    run_id = start_run(engine, token, "nowhere")["id"]

    error = wait_error(engine, token, "sbatch's refusal")
    assert "Invalid generic resource (gres) specification" in error["message"]
    reason = get_run(engine, token, run_id)["reason"]
    assert "Invalid generic resource" in reason and "trying again in" in reason
    assert slurm.fluksio_jobs(tmp_path) == []


@both_transports
def test_check_ssh_logs_in_and_says_how_then_shows_sinfo(
    slurm: LocalSlurm, tmp_path: Path, kind: str
) -> None:
    done = check_ssh(slurm, tmp_path, transport=kind)
    assert done.returncode == 0, done.stderr
    said = done.stdout.split("hpc: access works\n", 1)[1]
    assert said.startswith(f"  transport: {kind}\n  config: "), said
    assert f"\n  connects to: {slurm.login_with_port}\n  jump host: none\n" in said
    assert "\n  sinfo:\n  debug* up 1 " in said


def test_check_ssh_names_a_partition_the_cluster_does_not_have(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    done = check_ssh(slurm, tmp_path, profile={"sbatch": ["--partition=gpu-nowhere"]})
    assert done.returncode == 2, done.stdout
    assert (
        "profile 'small' asks for partition 'gpu-nowhere', which the cluster does not have"
        " (sinfo lists: debug)"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_check_ssh_names_a_profile_asking_past_its_partitions_time_limit(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    with short_partition() as partition:
        fits = {"name": "fits", "sbatch": [f"--partition={partition}", "--time=00:02:00"]}
        long = {"name": "long", "sbatch": [f"--partition={partition}", "--time=00:05:00"]}
        common = {"cpus": 1, "ram_mb": 300, "labels": ["hpc"]}
        done = check_ssh(slurm, tmp_path, profiles=[{**common, **fits}, {**common, **long}])
    assert done.returncode == 2, done.stdout
    assert (
        f"profile 'long' asks for jobs of 00:05:00, longer than partition '{partition}'"
        " (00:02:00) allows; ask for less, or name another partition"
    ) in done.stderr
    assert "'fits'" not in done.stderr


def _known(path: Path, port: int) -> bool:
    """Whether ``path`` holds a key for the login node (hashed or not: OpenSSH honours the
    system's HashKnownHosts)."""
    found = subprocess.run(
        ["ssh-keygen", "-F", f"[127.0.0.1]:{port}", "-f", str(path)],
        check=False,
        capture_output=True,
    )
    return found.returncode == 0


@both_transports
def test_an_unknown_host_key_is_refused_unless_trusted_on_first_use(
    slurm: LocalSlurm, tmp_path: Path, kind: str
) -> None:
    fresh = tmp_path / "known_hosts"
    fresh.write_text("")
    refused = check_ssh(slurm, tmp_path, known_hosts=str(fresh), transport=kind)
    assert refused.returncode == 2
    assert f"the host key is not in {fresh}" in refused.stderr
    assert "Traceback" not in refused.stderr
    trusted = check_ssh(
        slurm, tmp_path, known_hosts=str(fresh), trust_on_first_use=True, transport=kind
    )
    assert trusted.returncode == 0, trusted.stderr
    assert _known(fresh, slurm.port) and " ssh-ed25519 " in fresh.read_text()
    # Remembered now: checked without trusting anything new.
    assert check_ssh(slurm, tmp_path, known_hosts=str(fresh), transport=kind).returncode == 0


@both_transports
def test_a_changed_host_key_is_refused_even_when_trusting_on_first_use(
    slurm: LocalSlurm, tmp_path: Path, kind: str
) -> None:
    other = tmp_path / "other_host_key"
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=False
    )
    assert made.returncode == 0
    other_key = other.with_suffix(".pub").read_text().split()[:2]
    lying = tmp_path / "known_hosts"
    lying.write_text(f"[127.0.0.1]:{slurm.port} {' '.join(other_key)}\n")
    refused = check_ssh(
        slurm, tmp_path, known_hosts=str(lying), trust_on_first_use=True, transport=kind
    )
    assert refused.returncode == 2, refused.stdout
    assert "the host key CHANGED since it was recorded in" in refused.stderr
    assert f"ssh-keyscan -p {slurm.port} 127.0.0.1" in refused.stderr
    assert "trust_on_first_use" not in refused.stderr, "trusting cannot help here"
    assert lying.read_text().count("\n") == 1


def test_another_engines_job_is_neither_counted_nor_cancelled(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    # A second engine on the same cluster (another checkout, a site's test engine): its
    # job has our job's name, but its comment names a request no engine of this test made.
    submitted = slurm.ssh(
        "sbatch", "--parsable", "--job-name=fluksio-hpc-small",
        "--comment=fluksio-request=another-engines-request", "--begin=now+1hour",
        "--wrap", "sleep 60",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    theirs = submitted.stdout.strip().split(";")[0]
    try:
        engine, token = start(provision_timeout_s=0, profile={"sbatch": ["--begin=now+1hour"]})
        assert put_flow(engine, token, "held", [{"id": "n", "worker": "hpc", "code": NODE}])
        start_run(engine, token, "held")
        (ours,) = wait_for(
            lambda: slurm.fluksio_jobs(tmp_path), timeout=30, what="this engine's job"
        )
        assert ours != theirs
        slurm.cancel_leftovers(tmp_path)
        assert slurm.job_state(theirs) == "PENDING", "another engine's job was cancelled"
        assert slurm.fluksio_jobs(tmp_path) == []
    finally:
        slurm.ssh("scancel", theirs)
