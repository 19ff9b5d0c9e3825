"""Debian's Prometheus scrapes a running engine with the configuration docs/operating.md gives.

The page's ``yaml`` block is used as written; only the interval, the token file and the
target are replaced, each exactly once. Prometheus runs from a directory of its own, on a
port of its own, and is stopped by pid.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import cannot_run
from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.runs import run_flow, wait_run
from tests.support.wait import wait_for

pytestmark = pytest.mark.contract

DOC = Path(__file__).resolve().parent.parent / "docs" / "operating.md"
NODE = "def process():\n    return 1\n"


def documented_scrape_config() -> str:
    blocks: list[str] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if "scrape_configs" in b]
    return block


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"docs/operating.md's scrape config lost {old!r}"
    return text.replace(old, new)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EngineProcess]:
    process = start_engine(tmp_path / "data", tmp_path / "logs")
    yield process
    process.stop()


def _scraped(port: int, name: str) -> list[dict[str, Any]] | None:
    """Prometheus's samples of the engine's family ``name``, once it has scraped one."""
    return _query(port, f'{{__name__="{name}",job="fluksio"}}') or None


def _query(port: int, expression: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.loads(answer.read())
    except OSError:
        return []
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _prometheus(directory: Path, config: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("prometheus")
    if binary is None:
        message = "Debian's prometheus is not installed (make test installs it as root)"
        cannot_run(message)
    port = free_port()
    (directory / "prometheus.yml").write_text(config)
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=directory,
    )
    return process, port


def test_prometheus_scrapes_the_engine_with_a_scrape_token(
    engine: EngineProcess, tmp_path: Path
) -> None:
    access = engine.login()
    minted = engine.client(access).request(
        "POST", "/metrics/tokens", json_body={"name": "prometheus"}
    )
    assert minted.status == 201, minted
    directory = tmp_path / "prometheus"
    directory.mkdir()
    token_file = directory / "fluksio-scrape-token"
    token_file.write_text(minted.body["token"])
    token_file.chmod(0o600)
    wrong_file = directory / "wrong-token"
    wrong_file.write_text("fks_not-a-token-this-engine-minted")

    config = documented_scrape_config()
    config = _replace_once(config, "scrape_interval: 15s", "scrape_interval: 1s")
    config = _replace_once(config, "/etc/prometheus/fluksio-scrape-token", str(token_file))
    target = engine.url.removeprefix("http://")
    config = _replace_once(config, "engine.example.org:8080", target)
    # A second job, the same but with a token the engine never minted: refused.
    wrong = config.split("scrape_configs:\n", 1)[1].replace("job_name: fluksio", "job_name: wrong")
    config += _replace_once(wrong, str(token_file), str(wrong_file))

    run_id = run_flow(engine, access, "metered", [{"id": "n", "code": NODE}])
    assert wait_run(engine, access, run_id)["state"] == "succeeded"

    process, port = _prometheus(directory, config)
    try:

        def scraped() -> list[dict[str, Any]]:
            if process.poll() is not None:
                raise AssertionError((directory / "prometheus.log").read_text()[-3000:])
            return _query(port, 'fluksio_node_calls_total{outcome="succeeded"}')

        (series,) = wait_for(scraped, timeout=60, what="Prometheus to scrape the engine")
        assert series["metric"]["place"] == "engine" and series["metric"]["job"] == "fluksio"
        assert float(series["value"][1]) == 1
        (up,) = _query(port, 'up{job="fluksio"}')
        assert up["value"][1] == "1"
        for name in ("fluksio_event_subscribers", "fluksio_node_call_duration_seconds_count"):
            assert wait_for(
                functools.partial(_scraped, port, name),
                timeout=10,
                what=name,
            )
        assert wait_for(
            lambda: [r for r in _query(port, 'up{job="wrong"}') if r["value"][1] == "0"],
            timeout=20,
            what="the job with a wrong token to be refused",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
