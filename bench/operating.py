"""What watching an engine costs it: an open Workers screen, a feed subscriber, a scrape.

At 0, 100 and 1,000 attached (simulated, idle) workers, the engine's CPU for:

* **an idle screen**: the page's one open feed while nothing happens, as a share of a
  core, beside what the old page's polling cost (three conditional GETs a second, each
  answered 304) in the same run;
* **opening the screen**: the three views the page fetches once;
* **a feed subscriber under load**: the engine's extra CPU per one-node run on the
  engine with one subscriber reading the feed, against none;
* **one scrape** of ``GET /metrics``, and its size; the floor is ``GET /health`` (a
  request through the same middlewares that does nothing).

CPU is the scheduler's count of the engine's threads' time (``/proc/PID/task/*/schedstat``,
in ns), over windows of ``--window`` seconds; the per-run figures alternate with and
without a subscriber, three rounds, medians.
Run: ``.venv/bin/python bench/operating.py [--sizes 0,100,1000] [--window 10]``
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine
from idle_workers import CLIENT
from remote_calls import _login

HERE = Path(__file__).parent
NODE = "def process():\n    return 1\n"
ROUNDS = 3
RUNS = 150


def _cpu_s(pid: int) -> float:
    """The CPU time of every thread of ``pid``, from the scheduler's own count (ns): the
    10 ms ticks of ``/proc/PID/stat`` are too coarse for a screen's idle cost."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


class Subscriber(threading.Thread):
    """Reads ``GET /events`` on a connection of its own, counting events."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        host, port = url.split("://", 1)[1].split(":")
        self._connection = http.client.HTTPConnection(host, int(port), timeout=120)
        self._token = token
        self.events = 0
        self.ready = threading.Event()

    def run(self) -> None:
        self._connection.request(
            "GET", "/api/v1/events", headers={"Authorization": f"Bearer {self._token}"}
        )
        response = self._connection.getresponse()
        try:
            for line in response:
                if line.startswith(b"event: ready"):
                    self.ready.set()
                elif line.startswith(b"event: "):
                    self.events += 1
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        sock = self._connection.sock
        if sock is not None:
            # shutdown, not just close: the response being read holds the socket open.
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _cpu_over(pid: int, seconds: float) -> float:
    """The engine's CPU as a share of a core over ``seconds``."""
    started = _cpu_s(pid)
    time.sleep(seconds)
    return (_cpu_s(pid) - started) / seconds


def _cpu_per(pid: int, count: int, one: object) -> float:
    """The engine's CPU per call of ``one()`` (ms), over ``count`` calls."""
    assert callable(one)
    started = _cpu_s(pid)
    for _ in range(count):
        one()
    return (_cpu_s(pid) - started) / count * 1e3


def _polling_screen(api: Api, seconds: float) -> None:
    """The page before the feed: three conditional GETs each second."""
    tags: dict[str, str] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        for path in ("/workers", "/workers/resources", "/workers/tokens"):
            headers = {"If-None-Match": tags[path]} if path in tags else {}
            response, _body = api.request("GET", path, headers=headers)
            tags[path] = response.headers.get("ETag") or ""
        time.sleep(max(0.0, 1 - (time.monotonic() - tick)))


def _until_unsubscribed(url: str, token: str) -> None:
    """Wait until the engine's metrics show no open stream (it notices within a second)."""
    host, port = url.split("://", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        if b"\nfluksio_event_subscribers 0.0\n" in connection.getresponse().read():
            return
        time.sleep(0.05)
    raise RuntimeError("the engine still counts a subscriber after 30 s")


def _feed_under_load(pid: int, api: Api, url: str) -> dict[str, float]:
    """Runs with one subscriber and with none, alternately, so drift hits both alike."""
    with_feed: list[float] = []
    without: list[float] = []
    for _round in range(ROUNDS):
        without.append(_cpu_per(pid, RUNS, lambda: api.run_to_end("one")))
        subscriber = Subscriber(url, str(api.token))
        subscriber.start()
        assert subscriber.ready.wait(30)
        with_feed.append(_cpu_per(pid, RUNS, lambda: api.run_to_end("one")))
        subscriber.stop()
        subscriber.join(timeout=30)
        _until_unsubscribed(url, str(api.token))
    return {
        "feed_per_run_ms": statistics.median(with_feed) - statistics.median(without),
        "run_ms": statistics.median(without),
    }


def _scrape(pid: int, api: Api, url: str) -> dict[str, float]:
    host, port = url.split("://", 1)[1].split(":")
    scraper = http.client.HTTPConnection(host, int(port), timeout=60)
    sizes: list[int] = []

    def scrape() -> None:
        scraper.request("GET", "/metrics", headers={"Authorization": f"Bearer {api.token}"})
        response = scraper.getresponse()
        sizes.append(len(response.read()))
        assert response.status == 200

    return {
        "scrape_ms": _cpu_per(pid, 200, scrape),
        "scrape_kb": sizes[-1] / 1024,
        "health_ms": _cpu_per(pid, 200, lambda: api.request("GET", "/health")),
    }


def measure(workers: int, window: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        clients: list[subprocess.Popen[str]] = []
        try:
            api = _login(url)
            token = api.call("POST", "/workers/tokens", {"name": "sim", "labels": ["sim"]})
            api.call("PUT", "/flows/one", {"nodes": [{"id": "n", "code": NODE}]})
            if workers:
                clients.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-c",
                            CLIENT,
                            str(HERE),
                            url,
                            token["token"],
                            "0",
                            str(workers),
                        ],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
                assert clients[0].stdout is not None
                assert clients[0].stdout.readline().strip() == "attached"
            for _ in range(20):
                api.run_to_end("one")  # warm: the first runs pay for imports
            time.sleep(1)
            pid = engine.pid
            found: dict[str, float] = {"idle": _cpu_over(pid, window)}

            subscriber = Subscriber(url, str(api.token))
            subscriber.start()
            assert subscriber.ready.wait(30)
            found["screen_idle"] = _cpu_over(pid, window) - found["idle"]
            found["open_ms"] = _cpu_per(
                pid,
                20,
                lambda: [
                    api.request("GET", p)
                    for p in ("/workers", "/workers/resources", "/workers/tokens")
                ],
            )
            subscriber.stop()
            found.update(_feed_under_load(pid, api, url))
            started = _cpu_s(pid)
            _polling_screen(api, window)
            found["polling_idle"] = (_cpu_s(pid) - started) / window - found["idle"]
            found.update(_scrape(pid, api, url))
            return found
        finally:
            for client in clients:
                assert client.stdin is not None
                client.stdin.write("\n")
                client.stdin.flush()
                client.wait(timeout=300)
            engine.terminate()
            engine.wait(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="0,100,1000")
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {n: measure(n, args.window) for n in sizes}
    print(f"engine CPU for what watches it; windows of {args.window:g} s")
    head = "".join(f"{f'{n} workers':>14}" for n in sizes)
    print(f"{'measure':52}{head}")
    rows = [
        ("engine idle, nobody watching (share of a core)", "idle", "{:.4f}"),
        ("idle screen: its open feed (share of a core)", "screen_idle", "{:.4f}"),
        ("  the old polling page, same run (share of a core)", "polling_idle", "{:.4f}"),
        ("opening the screen: three views (ms)", "open_ms", "{:.2f}"),
        ("one-node run on the engine (ms)", "run_ms", "{:.2f}"),
        ("  more per run with one feed subscriber (ms)", "feed_per_run_ms", "{:.3f}"),
        ("one scrape of /metrics (ms)", "scrape_ms", "{:.2f}"),
        ("  its size (KB)", "scrape_kb", "{:.1f}"),
        ("  floor: GET /health (ms)", "health_ms", "{:.2f}"),
    ]
    for label, key, shape in rows:
        cells = "".join(f"{shape.format(results[n][key]):>14}" for n in sizes)
        print(f"{label:52}{cells}")
    ratios = "".join(f"{results[n]['scrape_ms'] / results[n]['health_ms']:>14.1f}" for n in sizes)
    print(f"{'scrape / health':52}{ratios}")


if __name__ == "__main__":
    main()
