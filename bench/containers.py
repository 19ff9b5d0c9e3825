"""A no-op node in a podman container against the same node on the host, and the first
call in an image the worker does not hold yet; beside their floors in the same run.

* floors: ``python3 -c pass`` on the host (a bare fork and exec of an interpreter), and
  ``podman run --rm IMAGE true`` (a container that runs nothing), with the rlimits the
  worker found podman takes here;
* ours: one call through the launcher as ``fluksio-worker`` runs it, on the host (its
  fork server) and in the image (``podman run`` of the runner, its spec on stdin), until
  its result is read;
* cold: the first call in an image read from an OCI archive the worker has not pulled
  (removed before each sample, its one layer with it: a layer of its own, the trixie
  root file system and one more file), against ``podman pull`` of that archive and a
  ``podman run --rm IMAGE true`` after it.

Run as root after ``make containers-for-tests``:
``.venv/bin/python bench/containers.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from provisioning import median_ms, print_table

from fluksio.agent.containers import Podman
from fluksio.agent.containers.calls import ContainerCalls
from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import ContainerRef, RunFrame

IMAGE = "localhost/fluksio-test/trixie:1"
ROOT_FS = Path("/var/lib/fluksio-images/trixie.tar")
COLD = "localhost/fluksio-bench/cold:1"
NOOP = "def process():\n    return None\n"


async def _command(*argv: str) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if await process.wait() != 0:
        raise RuntimeError(f"{' '.join(argv)} failed")


def _cold_archive(folder: Path) -> str:
    """An OCI archive of an image whose one layer no other image has: removing the image
    removes the layer, so that each pull copies it again."""
    root_fs = folder / "root.tar"
    shutil.copy(ROOT_FS, root_fs)
    (folder / "marker").write_text(str(time.time()))
    with tarfile.open(root_fs, "a") as archive:
        archive.add(folder / "marker", arcname="fluksio-bench-marker")
    archive_path = folder / "cold.oci.tar"
    subprocess.run(
        ["podman", "import", "--quiet", str(root_fs), COLD], check=True, capture_output=True
    )
    subprocess.run(
        ["podman", "save", "--quiet", "--format", "oci-archive", "-o", str(archive_path), COLD],
        check=True,
    )
    subprocess.run(["podman", "rmi", COLD], check=True, capture_output=True)
    return f"oci-archive:{archive_path}"


async def _gone(image: str) -> None:
    """``image`` removed, with its layer: tried again while the container of the call
    before is still going away (the call ends at its result, before its container)."""
    for _ in range(100):
        with contextlib.suppress(RuntimeError):
            await _command("podman", "image", "exists", image)
            with contextlib.suppress(RuntimeError):
                await _command("podman", "rmi", "--force", image)
            await asyncio.sleep(0.1)
            continue
        return
    raise RuntimeError(f"podman could not remove {image}")


async def _measure(repeat: int, folder: Path) -> dict[str, float]:
    archived = _cold_archive(folder)
    runtime = Podman(("localhost/fluksio-test/*", f"oci-archive:{folder}/*"))
    await runtime.check()
    launcher = Launcher(containers=ContainerCalls(runtime))
    await launcher.start()
    counter = iter(range(1 << 30))

    async def call(image: str | None) -> None:
        container = None if image is None else ContainerRef(image=image)
        spec = RunFrame(
            call_id=f"b{next(counter)}", source=NOOP, node="n", flow="f", container=container
        )
        outcome = await launcher.run(spec)
        if not outcome.ok:
            raise RuntimeError(f"the call failed: {outcome.error}")

    async def removed() -> None:
        runtime.forget(archived)
        await _gone(COLD)

    await call(IMAGE)  # the image's layers in the page cache before anything is timed
    await call(None)
    results = {
        "floor: python3 -c pass (host)": await median_ms(
            repeat, lambda: _command("python3", "-c", "pass")
        ),
        "floor: podman run --rm IMAGE true": await median_ms(
            repeat, lambda: _command("podman", "run", "--rm", *runtime.settings, IMAGE, "true")
        ),
        "ours: a no-op call on the host": await median_ms(repeat, lambda: call(None)),
        "ours: a no-op call in the image": await median_ms(repeat, lambda: call(IMAGE)),
    }
    # A pull's time varies with the disk by half: the two alternate, so that both see it.
    pulls: list[float] = []
    firsts: list[float] = []

    async def pull() -> None:
        await _command("podman", "pull", "-q", archived)
        await _command("podman", "run", "--rm", *runtime.settings, COLD, "true")

    async def first_call() -> None:
        await call(archived)

    for _ in range(max(5, repeat // 2)):
        for samples, work in ((pulls, pull), (firsts, first_call)):
            await removed()
            started = time.perf_counter()
            await work()
            samples.append((time.perf_counter() - started) * 1000)
    results["floor: podman pull of the OCI archive, then run true"] = statistics.median(pulls)
    results["ours: first call, image not held (pulled)"] = statistics.median(firsts)
    await launcher.close()
    await _gone(COLD)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as folder:
        results = asyncio.run(_measure(args.repeat, Path(folder)))
    print_table(results, "p50 ms")


if __name__ == "__main__":
    main()
