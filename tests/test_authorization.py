"""Who may do what: superuser endpoints, login answers, and the slowdown after failures.

In the test's process (``create_app``): these are answers of the HTTP layer alone.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fluksio.engine.users import UserStore
from tests.support.clock import ManualClock
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.wait import advance_until

SUPERUSER_ENDPOINTS = [
    ("POST", "/workers/tokens", {"name": "w", "labels": []}),
    ("GET", "/workers/tokens", None),
    ("POST", "/workers/tokens/0123/revoke", None),
    ("GET", "/metrics/tokens", None),
    ("PUT", "/secrets/s", {"value": "v", "labels": []}),
]
"""A superuser's routes (flows, runs, workers and resources are any user's: test_roles)."""


@pytest.mark.parametrize(("method", "path", "body"), SUPERUSER_ENDPOINTS)
async def test_unauthenticated_is_401_and_non_superuser_is_403(
    api: InProcessEngine, method: str, path: str, body: object
) -> None:
    anonymous = await api.request(method, path, json_body=body, token="")
    assert anonymous.status == 401 and "bearer token" in anonymous.body["detail"]

    UserStore(api.database).add("alice", "alice-password", is_superuser=False)
    plain = await api.login("alice", "alice-password")
    forbidden = await api.request(method, path, json_body=body, token=plain)
    assert forbidden.status == 403 and "not a superuser" in forbidden.body["detail"]


async def test_a_401_says_how_to_authenticate(api: InProcessEngine) -> None:
    async with api.client.get("/api/v1/workers/tokens") as answer:
        assert answer.status == 401
        assert answer.headers.get("WWW-Authenticate") == "Bearer"


async def test_unknown_user_and_wrong_password_get_the_same_answer(api: InProcessEngine) -> None:
    url = "/login/access-token"
    unknown = await api.request("POST", url, form={"username": "nobody", "password": "x"})
    wrong = await api.request("POST", url, form={"username": SUPERUSER, "password": "x"})
    assert unknown.status == wrong.status == 401
    assert unknown.body == wrong.body == {"detail": "incorrect username or password"}


async def test_missing_form_field_names_it(api: InProcessEngine) -> None:
    answer = await api.request("POST", "/login/access-token", form={"username": SUPERUSER})
    assert answer.status == 422
    assert answer.body == {"detail": "password: is required", "field": "password"}


async def test_repeated_failures_are_slowed_down_then_allowed_again(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, tmp_path / "data", clock=clock)
    url = "/login/access-token"
    for _ in range(5):
        guess = await api.request("POST", url, form={"username": SUPERUSER, "password": "guess"})
        assert guess.status == 401
    right = {"username": SUPERUSER, "password": SUPERUSER_PASSWORD}
    async with api.client.post(f"/api/v1{url}", data=right) as blocked:
        assert blocked.status == 429
        assert "too many failed logins" in (await blocked.json())["detail"]
        retry_after = int(blocked.headers["Retry-After"])
        assert retry_after >= 1
    started = clock.now()

    async def allowed() -> bool:
        return (await api.request("POST", url, form=right)).status == 200

    await advance_until(clock, 0.5, allowed, timeout=10, what="the login slowdown to pass")
    assert retry_after - 1 <= clock.now() - started <= retry_after + 0.5


async def test_an_access_token_is_refused_once_it_expires_though_it_was_accepted_before(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Accepted tokens are remembered (their signature is not checked twice); their
    # expiry still is, at every use, on the engine's clock.
    clock = ManualClock(time.time())
    api = await start_in_process(
        aiohttp_client, tmp_path / "data", clock=clock, access_token_ttl_s=600
    )
    assert (await api.request("GET", "/workers")).status == 200
    clock.advance(599)
    assert (await api.request("GET", "/workers")).status == 200
    clock.advance(1)
    expired = await api.request("GET", "/workers")
    assert expired.status == 401
    assert expired.body["detail"] == "the access token has expired"


async def test_an_attached_worker_is_let_go_when_its_token_expires(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, tmp_path / "data", clock=clock)
    # A token of two minutes, which the API does not mint: the engine's token service.
    minted = api.engine._tokens.mint_worker("box", ("cpu",), created_by=None, ttl_s=120)
    worker = await api.attach(minted.token, name="box", labels=["cpu"])
    (session,) = api.engine.workers.attached()

    async def let_go() -> bool:
        return worker.socket.closed

    # In steps, so that it answers the engine's pings all along: only its token ends.
    await advance_until(clock, 5, let_go, timeout=10, what="the worker to be let go")
    assert 120 <= clock.now() - session.machine.attached_at <= 125
    assert session.machine.closed_reason == "the worker token expired; mint a new one"
    again = await api.request("GET", "/workers/tokens/self", token=minted.token)
    assert again.status == 401 and "expired" in again.body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"labels": ["gpu"]}, "name"),
        ({"name": "", "labels": []}, "name"),
        ({"name": "x" * 64, "labels": []}, "name"),
        ({"name": "ok", "labels": ["has space"]}, "labels.0"),
        ({"name": "ok", "labels": "gpu"}, "labels"),
        ({"name": "ok", "labels": [f"l{i}" for i in range(33)]}, "labels"),
        ({"name": "ok", "labels": [], "extra": 1}, "extra"),
    ],
)
async def test_mint_validation_names_the_field(
    api: InProcessEngine, body: dict[str, object], field: str
) -> None:
    answer = await api.request("POST", "/workers/tokens", json_body=body)
    assert answer.status == 422
    assert answer.body["field"] == field
    assert answer.body["detail"].startswith(f"{field}: ")
    assert (await api.request("GET", "/workers/tokens")).body == [], "a refused mint stores nothing"


async def test_mint_with_invalid_json_is_a_clear_4xx(api: InProcessEngine) -> None:
    headers = {"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"}
    async with api.client.post("/api/v1/workers/tokens", data="{", headers=headers) as answer:
        assert answer.status == 422 and (await answer.json())["field"] == "body"


async def test_duplicate_labels_are_folded(api: InProcessEngine) -> None:
    answer = await api.request(
        "POST", "/workers/tokens", json_body={"name": "dupes", "labels": ["gpu", "cuda12", "gpu"]}
    )
    assert answer.status == 201 and answer.body["labels"] == ["gpu", "cuda12"]


async def test_refused_tokens_slow_their_client_down_on_every_endpoint(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Before, 200 attach attempts with a bad token were all answered 401 in 0.3 s: the
    # socket and the bearer endpoints had no slowdown, only the login form did.
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    assert (await api.request("GET", "/workers")).status == 200  # a session in use
    statuses = []
    for attempt in range(30):
        path = "/api/v1/workers/attach" if attempt % 2 else "/api/v1/workers"
        headers = {"Authorization": "Bearer forged"}
        if attempt % 3 == 0:  # the published agent's way
            path, headers = "/api/v1/workers/attach?token=forged", {}
        async with api.client.get(path, headers=headers) as answer:
            statuses.append(answer.status)
            if answer.status == 429:
                assert int(answer.headers["Retry-After"]) >= 1
                assert "too many refused credentials" in (await answer.json())["detail"]
    assert statuses[:20] == [401] * 20, "the first failures are free"
    assert set(statuses[20:]) == {429}, statuses
    # A session in use at that address (a token verified before) is not held up.
    assert (await api.request("GET", "/workers")).status == 200
    # Requests without a credential (what needs none) are not slowed.
    async with api.client.get("/api/v1/health") as health:
        assert health.status == 200
