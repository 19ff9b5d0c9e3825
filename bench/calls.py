"""No-op node calls on the engine: latency and throughput, beside their floors.

Starts a real engine (``fluksio serve``) on 127.0.0.1 with a fresh data directory and
measures, over one keep-alive HTTP connection:

* a one-node run, from ``POST /flows/{name}/runs`` to the run's finished state
  (``GET /runs/{id}?wait=``), p50 and p99;
* a fan-out of 1,000 independent no-op nodes in one run: calls per second, each call in
  a fresh process;
* the launcher alone (no HTTP, no database): one call, p50; and the CPU time per call of
  the launcher, its fork server and the calls, 2,000 calls with 8 in flight.

Floors measured in the same run: spawning ``python -I -S -c pass`` per call, and a bare
``fork`` + exit + wait from a small ``python -I -S`` process.

Run: ``.venv/bin/python bench/calls.py [--runs N] [--fanout N] [--mode auto|spawn]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import RunFrame

BIN = Path(sys.executable).parent
CHECKOUT = Path(__file__).resolve().parent.parent
# The benchmarks speak to engines through the tests' client interface
# (tests/support/client.py) where the client is not what they measure.
if str(CHECKOUT) not in sys.path:
    sys.path.append(str(CHECKOUT))
NOOP = "def process():\n    return None\n"
FORKS_FOR_CPU = 2000
FORK_FLOOR = """
import os, time
samples = []
for _ in range(N):
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    samples.append(time.perf_counter() - started)
samples.sort()
print(samples[len(samples) // 2] if samples else "")
"""


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


class Api:
    """One keep-alive connection to the engine's API; ``https://`` trusts ``ca_file``."""

    def __init__(self, url: str, token: str | None = None, ca_file: str | None = None) -> None:
        secure = url.startswith("https://")
        host, port = url.split("://", 1)[1].split(":")
        self._connection: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                host, int(port), timeout=120, context=ssl.create_default_context(cafile=ca_file)
            )
            if secure
            else http.client.HTTPConnection(host, int(port), timeout=120)
        )
        self.token = token

    @classmethod
    def logged_in(cls, url: str, ca_file: str | None = None) -> Api:
        """An API connection with the bench superuser's access token."""
        api = cls(url, ca_file=ca_file)
        form = "username=bench&password=bench-password"
        api.token = api.call("POST", "/login/access-token", form=form)["access_token"]
        return api

    def call(
        self, method: str, path: str, body: object | None = None, form: str | None = None
    ) -> Any:
        """The parsed JSON answer; an error status raises."""
        headers: dict[str, str] = {}
        data = None
        if form is not None:
            data, headers["Content-Type"] = form, "application/x-www-form-urlencoded"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body), "application/json"
        response, payload = self.request(method, path, data, headers)
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return json.loads(payload)

    def request(
        self, method: str, path: str, data: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """The answer as it came (status and headers) and its body, whatever the status."""
        sent = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        sent.update(headers or {})
        self._connection.request(method, f"/api/v1{path}", body=data, headers=sent)
        response = self._connection.getresponse()
        return response, response.read()

    def run_to_end(self, flow: str) -> dict[str, Any]:
        run = self.call("POST", f"/flows/{flow}/runs", {"params": {}})
        while run["state"] not in {"succeeded", "failed", "cancelled"}:
            run = self.call("GET", f"/runs/{run['id']}?wait=30")
        ended: dict[str, Any] = run
        return ended


def start_engine(
    data_dir: Path,
    mode: str,
    port: int = 0,
    args: tuple[str, ...] = (),
    *,
    bin_dir: Path = BIN,
    profile: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """``fluksio serve`` (from ``bin_dir``: another build's venv) with the bench superuser;
    ``args`` are more of its options. With ``profile``, it runs under ``cProfile``, which
    writes there when the engine stops on SIGINT."""
    env = dict(os.environ, FLUKSIO_SUPERUSER="bench", FLUKSIO_SUPERUSER_PASSWORD="bench-password")
    profiled = [str(bin_dir / "python"), "-m", "cProfile", "-o", str(profile)] if profile else []
    process = subprocess.Popen(
        [
            *profiled,
            str(bin_dir / "fluksio"),
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--runner-mode",
            mode,
            "--log-level",
            "warning",
            *args,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            info = json.loads((data_dir / "engine.json").read_text())
            if info.get("pid") == process.pid:
                return process, str(info["url"])
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("the engine did not start")


def start_worker(api: Api, url: str, label: str) -> subprocess.Popen[bytes]:
    """A ``fluksio-worker`` carrying ``label``, attached (its token minted through ``api``)."""
    minted = api.call("POST", "/workers/tokens", {"name": label, "labels": [label]})
    worker = subprocess.Popen(
        [
            str(BIN / "fluksio-worker"),
            "--url",
            url.replace("http", "ws", 1) + "/api/v1/workers/attach",
            "--labels",
            label,
        ],
        env={**os.environ, "FLUKSIO_WORKER_TOKEN": minted["token"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not api.call("GET", "/workers") and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker


def agent(
    url: str, token: str, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """One of our agents dialling the engine at ``url`` (its HTTP base), quietly; the
    token in its environment."""
    return subprocess.Popen(
        [
            str(BIN / "fluksio-worker"),
            "--url",
            url.replace("http", "ws", 1) + "/api/v1/workers/attach",
            *options,
        ],
        env={**os.environ, **(env or {}), "FLUKSIO_WORKER_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(*processes: subprocess.Popen[bytes] | None) -> None:
    """Terminate each process started (None: never started) and wait for it, in order."""
    for process in processes:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)


def ab_arguments(doc: str | None) -> argparse.ArgumentParser:
    """An A/B benchmark's arguments: the two builds' venvs, the same work run on each."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--a", type=Path, required=True, help="the first build's venv")
    parser.add_argument("--b", type=Path, required=True, help="the second build's venv")
    return parser


def process_cpu_seconds(pid: int) -> float:
    """CPU time of one process alone (every thread of it; not its children): the engine's
    own work, without its fork server's or its calls'. From the scheduler's accounting
    (``/proc/PID/task/*/schedstat``, in nanoseconds), not ``utime``/``stime``, whose
    10 ms ticks are coarser than the differences measured."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def measure_engine(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_engine(Path(tmp) / "data", args.mode)
        try:
            api = Api.logged_in(url)
            api.call("PUT", "/flows/one", {"nodes": [{"id": "noop", "code": NOOP}]})
            nodes = [{"id": f"n{i}", "code": NOOP} for i in range(args.fanout)]
            api.call("PUT", "/flows/fanout", {"nodes": nodes})
            for _ in range(20):  # warm up the fork server and the connection
                api.run_to_end("one")
            latencies = []
            cpu_before = process_cpu_seconds(process.pid)
            for _ in range(args.runs):
                started = time.perf_counter()
                run = api.run_to_end("one")
                latencies.append(time.perf_counter() - started)
                assert run["state"] == "succeeded", run
            run_cpu = (process_cpu_seconds(process.pid) - cpu_before) / args.runs
            cpu_before = process_cpu_seconds(process.pid)
            started = time.perf_counter()
            run = api.run_to_end("fanout")
            fanout_s = time.perf_counter() - started
            fanout_cpu = (process_cpu_seconds(process.pid) - cpu_before) / args.fanout
            assert run["state"] == "succeeded"
        finally:
            process.terminate()
            process.wait(timeout=30)
    return {
        "run_p50": percentile(latencies, 0.5),
        "run_p99": percentile(latencies, 0.99),
        "fanout_rate": args.fanout / fanout_s,
        "run_cpu": run_cpu,
        "fanout_cpu": fanout_cpu,
    }


def measure_launcher(mode: str, count: int) -> float:
    async def main() -> float:
        launcher = Launcher(mode=mode)
        await launcher.start()
        samples = []
        for n in range(count + 20):
            started = time.perf_counter()
            await launcher.run(RunFrame(call_id=f"c{n}", source=NOOP, node="noop", flow="f"))
            samples.append(time.perf_counter() - started)
        await launcher.close()
        return statistics.median(samples[20:])

    return asyncio.run(main())


def _cpu_seconds() -> float:
    """CPU time of this process and of every descendant it has waited for, so far."""
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def measure_launcher_cpu(mode: str, count: int, at_once: int) -> float:
    """CPU seconds per call of the launcher, its fork server and the calls, ``at_once``
    in flight: the fork server's children are reaped by it, and it by us on close."""

    async def main() -> float:
        started = _cpu_seconds()
        launcher = Launcher(mode=mode)
        await launcher.start()
        gate = asyncio.Semaphore(at_once)

        async def one(n: int) -> None:
            async with gate:
                await launcher.run(RunFrame(call_id=f"c{n}", source=NOOP, node="noop", flow="f"))

        await asyncio.gather(*(one(n) for n in range(count)))
        await launcher.close()
        return (_cpu_seconds() - started) / count

    return asyncio.run(main())


def _forks(python: str, count: int) -> tuple[float, float]:
    """The p50 wall time of a bare fork + exit + wait under ``python``, and the CPU
    seconds of the whole process doing ``count`` of them."""
    before = _cpu_seconds()
    forks = subprocess.run(
        [python, "-I", "-S", "-c", FORK_FLOOR.replace("N", str(count))],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(forks.stdout.strip() or "nan"), _cpu_seconds() - before


def bare_fork_cpu(python: str, count: int) -> float:
    """CPU seconds per bare fork + exit + wait under ``python -I -S``: the same program
    forking none is subtracted, so that the interpreter's start is not counted."""
    _p50, forking = _forks(python, count)
    _none, starting = _forks(python, 0)
    return (forking - starting) / count


def python_pass_ms(times: int = 20) -> float:
    """The floor most benches print beside their figures: a bare ``python -c pass`` with
    this interpreter, its median over ``times`` runs, in ms."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1000


def measure_floors(count: int) -> dict[str, float]:
    python = os.path.realpath(sys.base_prefix + "/bin/python3")
    spawn = []
    for _ in range(count):
        started = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-c", "pass"], check=True)
        spawn.append(time.perf_counter() - started)
    fork_p50, _cpu = _forks(python, count * 5)
    return {
        "spawn_p50": statistics.median(spawn),
        "fork_p50": fork_p50,
        # Enough forks that the first few (the page tables still warm) weigh nothing.
        "fork_cpu": bare_fork_cpu(python, max(count * 5, FORKS_FOR_CPU)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--mode", default="auto", choices=["auto", "fork", "spawn"])
    args = parser.parse_args()

    floors = measure_floors(100)
    launcher_p50 = measure_launcher(args.mode, 200)
    launcher_cpu = measure_launcher_cpu(args.mode, 2000, 8)
    engine = measure_engine(args)

    ms = 1e3
    print(f"runner mode {args.mode}; {os.cpu_count()} cores; Python {sys.version.split()[0]}")
    print(f"{'measure':58} {'value':>10} {'x floor':>8}")
    print(f"{'floor: spawn python -I -S -c pass, p50 (ms)':58} {floors['spawn_p50'] * ms:10.2f}")
    print(f"{'floor: bare fork + exit + wait, p50 (ms)':58} {floors['fork_p50'] * ms:10.2f}")
    print(
        f"{'launcher alone: one no-op call, p50 (ms)':58} {launcher_p50 * ms:10.2f}"
        f" {launcher_p50 / floors['fork_p50']:8.1f}"
    )
    print(f"{'floor: CPU of a bare fork + exit + wait (ms)':58} {floors['fork_cpu'] * ms:10.2f}")
    print(
        f"{'launcher alone: CPU per call, 8 at once, all processes (ms)':58}"
        f" {launcher_cpu * ms:10.2f} {launcher_cpu / floors['fork_cpu']:8.1f}"
    )
    print(
        f"{'one-node run, POST to finished, p50 (ms)':58} {engine['run_p50'] * ms:10.2f}"
        f" {engine['run_p50'] / floors['fork_p50']:8.1f}"
    )
    print(f"{'one-node run, POST to finished, p99 (ms)':58} {engine['run_p99'] * ms:10.2f}")
    print(f"{'  engine process CPU per one-node run (ms)':58} {engine['run_cpu'] * ms:10.2f}")
    print(f"{f'fan-out of {args.fanout} no-op nodes (calls/s)':58} {engine['fanout_rate']:10.0f}")
    fanout_cpu = engine["fanout_cpu"] * ms
    print(f"{'  engine process CPU per call of the fan-out (ms)':58} {fanout_cpu:10.2f}")
    print(
        f"{'  the same work as spawned interpreters, serially (calls/s)':58}"
        f" {1 / floors['spawn_p50']:10.0f}"
    )


if __name__ == "__main__":
    main()
