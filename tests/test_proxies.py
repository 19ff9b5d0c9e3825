"""Behind a reverse proxy: the real client for login throttling, and the public URL.

In process for the rules; ``tests/test_deploying.py`` runs Debian's nginx in front of a
real engine with the documented configuration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluksio.agent.urls import parse_attach_url
from fluksio.api.proxies import (
    client_address,
    parse_public_url,
    parse_trusted_proxies,
)
from tests.support.cli import fluksio
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process

PROXY = parse_trusted_proxies(["127.0.0.1", "10.0.0.0/8"])


def test_the_client_is_the_rightmost_address_no_trusted_proxy_added() -> None:
    assert client_address(["127.0.0.2"], PROXY) == "127.0.0.2"
    # A client may send its own X-Forwarded-For: what it wrote stands left of what the
    # proxy appended, and is not believed.
    assert client_address(["6.6.6.6, 127.0.0.2"], PROXY) == "127.0.0.2"
    assert client_address(["127.0.0.2, 10.1.2.3", "10.9.9.9"], PROXY) == "127.0.0.2"
    assert client_address(["not-an-address"], PROXY) is None
    assert client_address([], PROXY) is None
    assert client_address(["10.0.0.5"], PROXY) == "10.0.0.5", "only proxies: the first"


@pytest.mark.process
def test_bad_proxy_and_public_url_options_are_one_sentence() -> None:
    with pytest.raises(ValueError, match="'nope' is not an IP address or network"):
        parse_trusted_proxies(["nope"])
    assert parse_public_url("https://fluksio.example.com/api/v1/") == "https://fluksio.example.com"
    assert parse_public_url("https://h.example/fluksio/") == "https://h.example/fluksio"
    with pytest.raises(ValueError, match="is not an http:// or https:// URL with a host"):
        parse_public_url("fluksio.example.com")
    bad = fluksio("serve", "--public-url", "ftp://x", "--data-dir", "/nonexistent/never")
    assert bad.returncode == 2 and "--public-url" in bad.stderr and "Traceback" not in bad.stderr
    bad = fluksio("serve", "--trusted-proxy", "10.0.0.0/99", "--data-dir", "/nonexistent/never")
    assert bad.returncode == 2 and "'10.0.0.0/99' is not an IP address" in bad.stderr


async def _fail_logins(api: InProcessEngine, address: str, count: int) -> list[int]:
    statuses = []
    for attempt in range(count):
        answer = await api.client.post(
            "/api/v1/login/access-token",
            data={"username": f"nobody{attempt}", "password": "wrong"},
            headers={"X-Forwarded-For": address},
        )
        statuses.append(answer.status)
    return statuses


async def _login_from(api: InProcessEngine, address: str) -> int:
    answer = await api.client.post(
        "/api/v1/login/access-token",
        data={"username": SUPERUSER, "password": SUPERUSER_PASSWORD},
        headers={"X-Forwarded-For": address},
    )
    status: int = answer.status
    return status


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted-proxy", "no-trusted-proxy"])
async def test_login_throttling_sees_each_client_behind_a_trusted_proxy(
    aiohttp_client: ClientFactory, tmp_path: Path, trusted: bool
) -> None:
    api = await start_in_process(
        aiohttp_client,
        tmp_path / "data",
        login_free_failures=1,
        login_base_delay_s=60,
        trusted_proxies=("127.0.0.1",) if trusted else (),
    )
    # One client's typos (other usernames each time: the address budget is what fills).
    # An address is allowed four times a username's free failures (LoginGuard).
    statuses = await _fail_logins(api, "127.0.0.2", 5)
    assert statuses == [401, 401, 401, 401, 429]
    # Another client behind the same proxy is let in only when the engine believes it.
    assert await _login_from(api, "127.0.0.3") == (200 if trusted else 429)


async def test_the_public_url_is_on_health_and_in_every_welcome(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(
        aiohttp_client, tmp_path / "data", public_url="https://fluksio.example.com"
    )
    health = await api.request("GET", "/health")
    assert health.body["public_url"] == "https://fluksio.example.com"
    token = await api.mint("box", ["gpu"])
    async with api.client.ws_connect(
        "/api/v1/workers/attach", headers={"Authorization": f"Bearer {token}"}
    ) as ws:
        await ws.send_json(
            {
                "op": "hello",
                "protocol": 2,
                "name": "box",
                "labels": ["gpu"],
                "python": "/usr/bin/python3",
                "max_parallel": 1,
                "venv_digest": "x",
                "inventory": {"cpus": 1, "gpus": 0, "ram_mb": 100},
            }
        )
        welcome = await ws.receive_json(timeout=10)
    assert welcome["op"] == "welcome"
    assert welcome["artifacts"] == "https://fluksio.example.com/api/v1/artifacts"


def test_the_agent_takes_the_offered_artifact_url_only_under_the_url_rule() -> None:
    secure = parse_attach_url("wss://engine.example/api/v1/workers/attach", insecure=False)
    assert secure.offered_artifacts("https://files.example/api/v1/artifacts")
    assert secure.offered_artifacts("http://files.example/api/v1/artifacts") is None, (
        "the worker token would cross unencrypted"
    )
    assert secure.offered_artifacts("http://127.0.0.1:8080/api/v1/artifacts")
    plain = parse_attach_url("ws://10.1.1.1:8080/api/v1/workers/attach", insecure=True)
    assert plain.offered_artifacts("http://10.1.1.1:8080/api/v1/artifacts"), "--insecure"
    told = parse_attach_url(
        "wss://e.example/api/v1/workers/attach", insecure=False, artifact_url="https://mine/a"
    )
    assert told.artifacts_given and told.artifacts == "https://mine/a"
