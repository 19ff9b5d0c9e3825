"""The launcher's calls in podman containers, without an engine: the image made ready once
per worker with its progress in the call's output, a call's GPUs only, its memory bound,
no secret in any process's argv; and a worker whose runtime cannot start a container says
so once, at start."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fluksio.agent.containers import Podman
from fluksio.agent.containers.calls import ContainerCalls
from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import ContainerRef, RunFrame
from tests.support.containers import ARCHIVE, TRIXIE, need_podman
from tests.support.engine import BIN
from tests.support.launching import node

pytestmark = [pytest.mark.process, pytest.mark.xdist_group("containers")]

ARCHIVED = f"oci-archive:{ARCHIVE}"
SECRET = "artifact-token-that-must-stay-secret"


@pytest.fixture
async def podman_launcher(tmp_path: Path) -> AsyncIterator[Launcher]:
    need_podman()
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        # Fake GPUs: character devices as /dev/null is (1, 3), named as NVIDIA's are.
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(1, 3))
    runtime = Podman(("localhost/fluksio-test/*", f"oci-archive:{ARCHIVE.parent}/*"))
    await runtime.check()
    launched = Launcher(containers=ContainerCalls(runtime, dev_dir=dev))
    await launched.start()
    yield launched
    await launched.close()


async def _run(launcher: Launcher, source: str, image: str, **fields: Any) -> Any:
    spec = RunFrame(
        call_id=fields.pop("call_id", "c1"),
        source=node(source),
        node="n",
        flow="f",
        container=ContainerRef(image=image),
        **fields,
    )
    return await asyncio.wait_for(launcher.run(spec), 120)


HELLO = """
    def process():
        print("hello from inside", flush=True)
        return 1
"""


async def test_an_archived_image_is_pulled_once_with_its_progress_in_the_calls_output(
    podman_launcher: Launcher,
) -> None:
    first = await _run(podman_launcher, HELLO, ARCHIVED, call_id="first")
    assert first.ok, first
    assert f"fluksio: pulling {ARCHIVED} with podman, once for this worker" in first.logs
    assert "Writing manifest" in first.logs, first.logs  # podman's own progress
    assert first.logs.rstrip().endswith("hello from inside"), first.logs
    again = await _run(podman_launcher, HELLO, ARCHIVED, call_id="again")
    assert again.ok and again.logs == "hello from inside\n", again
    containers = podman_launcher.containers
    assert containers is not None and ARCHIVED in containers.runtime.held()


async def test_a_call_sees_its_own_gpus_device_nodes_and_no_others(
    podman_launcher: Launcher,
) -> None:
    source = """
        import os
        def process():
            return sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    """
    outcome = await _run(podman_launcher, source, TRIXIE, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert outcome.ok and outcome.result == ["nvidia1", "nvidiactl"], outcome
    none = await _run(
        podman_launcher, source, TRIXIE, call_id="c2", env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert none.ok and none.result == [], none


async def test_no_secret_reaches_a_process_listing_and_the_call_still_has_it(
    podman_launcher: Launcher,
) -> None:
    source = """
        import os, time
        def process():
            print("listing now", flush=True)
            time.sleep(1.5)
            return os.environ["FLUKSIO_ARTIFACT_TOKEN"] == os.environ["EXPECTED"]
    """
    env = {"FLUKSIO_ARTIFACT_TOKEN": SECRET, "EXPECTED": SECRET}
    running = asyncio.ensure_future(_run(podman_launcher, source, TRIXIE, env=env))
    seen: list[str] = []
    while not running.done():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                continue
        await asyncio.sleep(0.05)
    outcome = running.result()
    assert outcome.ok and outcome.result is True, outcome
    assert any("podman" in line and "run" in line for line in seen), "the listing missed the call"
    assert not [line for line in seen if SECRET in line]


async def test_a_call_past_its_ram_mb_is_killed_inside_its_container(
    podman_launcher: Launcher,
) -> None:
    source = """
        def process():
            held = bytearray(400 << 20)
            return len(held)
    """
    outcome = await _run(podman_launcher, source, TRIXIE, ram_mb=64)
    error = outcome.error or {}
    assert error.get("type") == "NodeOutOfMemory", outcome
    assert error["message"].startswith("its container was killed at its ram_mb of 64 MB"), error
    within = await _run(podman_launcher, source.replace("400", "16"), TRIXIE, ram_mb=128)
    assert within.ok and within.result == 16 << 20, within


def test_a_worker_whose_runtime_cannot_start_a_container_says_so_once_at_start(
    tmp_path: Path,
) -> None:
    """Here: podman not on its PATH. It exits 2 with one sentence, before it attaches."""
    env = {"PATH": "/nonexistent", "FLUKSIO_WORKER_TOKEN": "t"}
    done = subprocess.run(
        [str(BIN / "fluksio-worker"), "--url", "ws://127.0.0.1:9/api/v1/workers/attach",
         "--containers", "podman", "--allow-image", "localhost/*"],
        capture_output=True, text=True, env=env, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert done.returncode == 2, done
    assert said == [
        "Error: --containers podman: podman cannot start a container here:"
        " podman: No such file or directory"
    ], done.stderr
    no_images = subprocess.run(
        [str(BIN / "fluksio-worker"), "--url", "ws://127.0.0.1:9/api/v1/workers/attach",
         "--containers", "podman"],
        capture_output=True, text=True, env=env, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert no_images.returncode == 2 and "--allow-image" in no_images.stderr, no_images


async def test_an_image_it_cannot_pull_or_may_not_run_fails_the_call_saying_why(
    podman_launcher: Launcher,
) -> None:
    missing = f"oci-archive:{ARCHIVE.parent}/missing.tar"  # allowed, but not there
    outcome = await _run(podman_launcher, HELLO, missing)
    error = outcome.error or {}
    assert error.get("type") == "ContainerError", outcome
    assert error["message"] == f"podman could not pull image {missing!r} (see the call's output)"
    assert f"fluksio: pulling {missing} with podman" in outcome.logs, outcome.logs
    assert "Error" in outcome.logs, "podman's own words are in the call's output"
    refused = await _run(podman_launcher, HELLO, "registry.example/other:1", call_id="c2")
    assert (refused.error or {}).get("message") == (
        "this worker may not run the call's container: image 'registry.example/other:1' is not"
        " among this worker's --allow-image ('localhost/fluksio-test/*',"
        f" 'oci-archive:{ARCHIVE.parent}/*')"
    ), refused
