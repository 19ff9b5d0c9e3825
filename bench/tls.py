"""What TLS costs: a remote no-op call and a 1 GiB download, plain beside TLS, same run.

Two real engines on 127.0.0.1 from fresh data directories: one plain, one serving HTTPS and
WSS with a certificate made here by a private CA (``--tls-cert``/``--tls-key``). Each gets
one of our agents (``--ca-file`` for the TLS one). For each:

* a one-node run on the worker, ``POST /runs`` to finished, p50 and p99;
* a 1 GiB artifact: ``load_artifact(ref)`` into an empty cache, through the runner's own
  code (streamed ``GET``, hashed, verified), best of 3;
* the floor: ``curl`` downloading the same artifact to a file (``--cacert`` for TLS).

A third column puts Debian's nginx in front of a plain engine, configured as
``docs/deploying.md`` says, so TLS is nginx's (in C) and the engine's sendfile is kept.

Run: ``.venv/bin/python bench/tls.py [--runs N] [--size-mb N]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from artifacts import measure as measure_artifacts
from calls import NOOP, Api, start_engine
from remote_calls import _start_agent, _wait_attached, one_node_latency

from tests.support.certs import CertificateAuthority, KeyPair
from tests.support.engine import free_port
from tests.support.nginx import start_nginx


def _one_engine(
    tmp: Path,
    args: argparse.Namespace,
    tls: tuple[Path, Path, Path] | None,
    *,
    nginx: KeyPair | None = None,
) -> dict[str, float]:
    options: tuple[str, ...] = ()
    ca_file = None
    if tls is not None:
        cert, key, ca = tls
        ca_file = str(ca)
        if nginx is None:
            options = ("--tls-cert", str(cert), "--tls-key", str(key))
    engine_port = free_port()
    engine, url = start_engine(tmp / "data", "auto", port=engine_port, args=options)
    proxy = None
    try:
        if nginx is not None:
            proxy_port = free_port()
            proxy = start_nginx(tmp / "nginx", proxy_port, engine_port, nginx)
            url = f"https://127.0.0.1:{proxy_port}"
        api = Api.logged_in(url, ca_file=ca_file)
        token = api.call("POST", "/workers/tokens", {"name": "bench", "labels": ["remote"]})[
            "token"
        ]
        api.call("PUT", "/flows/one", {"nodes": [{"id": "n", "code": NOOP, "worker": "remote"}]})
        agent = _start_agent(url, token, 1, *(["--ca-file", ca_file] if ca_file else []))
        try:
            _wait_attached(api, "p1")
            results = one_node_latency(api, args.runs)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
        results.update(measure_artifacts(args.size_mb, api, url, token, tmp, ca_file=ca_file))
        return results
    finally:
        if proxy is not None:
            proxy.stop()
        engine.terminate()
        engine.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name in ("plain", "tls", "nginx"):
            (tmp / name).mkdir()
        ca = CertificateAuthority(tmp / "tls")
        pair = ca.issue("engine", ["127.0.0.1"])
        trust = (pair.cert, pair.key, ca.pem)
        plain = _one_engine(tmp / "plain", args, None)
        secure = _one_engine(tmp / "tls", args, trust)
        proxied = _one_engine(tmp / "nginx", args, trust, nginx=pair)
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}")
    print(
        f"{'measure':58} {'plain':>9} {'TLS':>9} {'TLS/plain':>10} {'nginx TLS':>10} {'/plain':>7}"
    )
    rows = [
        ("one-node run on a worker, p50 (ms)", "run_p50", 1e3),
        ("one-node run on a worker, p99 (ms)", "run_p99", 1e3),
        (f"download {args.size_mb} MiB: load_artifact to cache (GB/s)", "download", 1),
        (f"floor: curl downloads {args.size_mb} MiB to a file (GB/s)", "curl", 1),
        (f"upload {args.size_mb} MiB: save_artifact (GB/s)", "upload", 1),
    ]
    for label, key, scale in rows:
        a, b, c = plain[key] * scale, secure[key] * scale, proxied[key] * scale
        print(f"{label:58} {a:9.2f} {b:9.2f} {b / a:9.2f}x {c:10.2f} {c / a:6.2f}x")
    for name, row in (("plain", plain), ("TLS", secure), ("nginx TLS", proxied)):
        print(f"download / curl, {name}: {row['download'] / row['curl']:.2f}x")


if __name__ == "__main__":
    main()
