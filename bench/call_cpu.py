"""The CPU a call costs through the launcher, beside a bare fork's, under each Python a
worker's ``--python`` may be.

For each interpreter (this venv's, and pyenv's 3.12 and 3.13 where present): the
launcher (fork mode, its fork server under that interpreter) runs ``--calls`` no-op calls
with 8 at once, and the CPU of every process involved (this one's launcher, the fork
server, the calls) is divided by the calls; the floor is a bare ``fork`` + ``_exit`` +
``waitpid`` under the same interpreter, in the same run.

Run: ``.venv/bin/python bench/call_cpu.py [--calls N] [--python PATH ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import NOOP, _cpu_seconds, bare_fork_cpu

from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import RunFrame

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
AT_ONCE = 8


def _interpreters(asked: list[str]) -> list[str]:
    if asked:
        return asked
    found = [sys.executable]
    for version in ("3.12", "3.13"):
        candidates = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
        if candidates:
            found.append(str(candidates[-1]))
    return found


def launcher_cpu(python: str, count: int) -> float:
    """CPU seconds per call, all processes, ``AT_ONCE`` in flight."""

    async def main() -> float:
        started = _cpu_seconds()
        launcher = Launcher(python, mode="fork")
        await launcher.start()
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(n: int) -> None:
            async with gate:
                outcome = await launcher.run(
                    RunFrame(call_id=f"c{n}", source=NOOP, node="noop", flow="f")
                )
                assert outcome.ok, outcome.error

        await asyncio.gather(*(one(n) for n in range(count)))
        await launcher.close()
        return (_cpu_seconds() - started) / count

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--python", action="append", default=[])
    args = parser.parse_args()
    print(f"{args.calls} no-op calls, {AT_ONCE} at once; CPU of every process, per call")
    print("| interpreter | launcher (ms) | bare fork (ms) | launcher / fork |")
    print("|---|---:|---:|---:|")
    for python in _interpreters(args.python):
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        launcher_cpu(python, 50)  # warm the disk cache and the launcher's own imports
        ours = launcher_cpu(python, args.calls)
        floor = bare_fork_cpu(python, args.calls * 5)
        print(f"| {version} | {ours * 1e3:.2f} | {floor * 1e3:.2f} | {ours / floor:.1f} |")


if __name__ == "__main__":
    main()
