"""What a hostile answer costs a Python client: its peak memory, beside a floor.

A server on 127.0.0.1 (``tests/support/hostile.py``) answers ``GET /runs/r1`` with a
chunked body of the given size and no declared length, as a broken proxy or a hostile
server might; the blocking client, with its default bounds (256 MiB an answer), reads it
in a fresh process, which reports its peak resident memory (``ru_maxrss``) and how it
ended. The floor is the same process reading a 1-byte answer: an interpreter with the
client imported. Before issue 48 the client read any answer whole, then parsed it (a
1 GiB one: 6.0 GiB and a ``RecursionError``). The last row is 32 MiB of ``[{}, {}, ...]``,
which became 906 MiB of dicts before issue 65.

Run: ``.venv/bin/python bench/client_bounds.py [--mib 64 1024]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from tests.support.hostile import endless_chunks, fixed, hostile_server

_READER = """
import json, resource, sys, time
from fluksio.client import Client, ClientError
started = time.monotonic()
try:
    Client(sys.argv[1], token="t").run("r1")
    ended = "read"
except ClientError as exc:
    ended = str(exc)[:70]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"peak_mib": peak, "s": time.monotonic() - started, "ended": ended}))
"""


def _read(url: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _READER, url], capture_output=True, text=True, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 1024])
    sizes = parser.parse_args().mib
    with hostile_server(fixed("200 OK", b"1")) as server:
        floor = float(str(_read(server.url)["peak_mib"]))
    print(f"{'answer (MiB)':>12}  {'peak RSS (MiB)':>14}  {'x floor':>7}  {'s':>5}  ended")
    print(f"{'floor':>12}  {floor:14.1f}  {1.0:7.2f}  {'':>5}  a 1-byte answer")
    for mib in sizes:
        with hostile_server(endless_chunks(mib << 20)) as server:
            got = _read(server.url)
        peak = float(str(got["peak_mib"]))
        seconds = float(str(got["s"]))
        print(f"{mib:12d}  {peak:14.1f}  {peak / floor:7.2f}  {seconds:5.1f}  {got['ended']}")
    # What the answer becomes bounds it too (issue 65): 32 MiB of empty objects, a GiB of
    # dicts once parsed, under the bound on bytes.
    # (Made without a list: the reader is forked from this process, and its peak counts
    # what this one held when it forked.)
    objects = b"[" + b"{}," * ((32 << 20) // 3) + b"{}]"
    with hostile_server(fixed("200 OK", objects)) as server:
        got = _read(server.url)
    peak, seconds = float(str(got["peak_mib"])), float(str(got["s"]))
    print(f"{'32 of {}':>12}  {peak:14.1f}  {peak / floor:7.2f}  {seconds:5.1f}  {got['ended']}")


if __name__ == "__main__":
    main()
