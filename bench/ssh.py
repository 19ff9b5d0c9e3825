"""One command on the login node through each SSH transport, beside its floors.

Against the login node ``make slurm-up`` starts on 127.0.0.1 (root, and its state in
``/var/lib/fluksio-slurm``). Each transport runs ``true`` there over and over, and the
table gives the median per command:

* ``asyncssh``: one connection kept open (a channel per command);
* ``openssh``, shared: the system ``ssh`` through the master connection (ControlMaster);
* ``openssh`` without sharing: a full login per command (``control_path=None``).

Floors in the same run: spawning a local ``true``, and a bare ``ssh -O check`` on the
master's socket (what the shared path spends before it sends anything).

Run: ``.venv/bin/python bench/ssh.py [--commands N]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from fluksio.ssh import AsyncsshTransport, OpenSSHTransport
from fluksio.ssh.shell import RemoteShell
from tests.support.slurm import local_slurm


async def _median_ms(action: Callable[[], Awaitable[object]], count: int) -> float:
    await action()  # the first one logs in: not a per-command cost
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


async def _spawn_true() -> None:
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commands", type=int, default=50)
    args = parser.parse_args()
    slurm = local_slurm()
    login, key, known = slurm.login_with_port, slurm.key, slurm.known_hosts
    with tempfile.TemporaryDirectory() as tmp:
        socket = Path(tmp) / "ssh"
        shells: list[tuple[str, RemoteShell]] = [
            (
                "asyncssh, one connection kept open",
                AsyncsshTransport(login, key, known_hosts=known),
            ),
            (
                "openssh, through the shared master",
                OpenSSHTransport(login, key, known_hosts=known, control_path=socket),
            ),
            ("openssh, a login per command", OpenSSHTransport(login, key, known_hosts=known)),
        ]
        rows = [("floor: spawn a local `true`", await _median_ms(_spawn_true, args.commands))]
        for label, shell in shells:
            try:
                rows.append(
                    (label, await _median_ms(functools.partial(shell.run, ["true"]), args.commands))
                )
                if label.startswith("openssh, through"):
                    check = ["ssh", "-o", f"ControlPath={socket}", "-O", "check", "x"]

                    async def master_check(argv: list[str] = check) -> None:
                        process = await asyncio.create_subprocess_exec(
                            *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                        )
                        await process.wait()

                    rows.insert(1, ("floor: `ssh -O check` on the master's socket",
                                    await _median_ms(master_check, args.commands)))  # fmt: skip
            finally:
                await shell.close()
    print(f"one command on the login node, median of {args.commands}")
    print(f"{'measure':48} {'ms':>8}")
    for label, value in rows:
        print(f"{label:48} {value:8.2f}")


if __name__ == "__main__":
    asyncio.run(main())
