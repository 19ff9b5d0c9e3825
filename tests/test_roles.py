"""Two roles, and every route walked with each: what a user may do, what a superuser also may.

The walk reads the engine's own OpenAPI document, where every route declares who may
call it once (``x-fluksio-role`` and ``security``), and calls each route with no token, a
user's access token and a superuser's. A user reaches flows, runs, logs, the live feed,
workers and resources, and artifacts; worker tokens, scrape tokens and secrets are a
superuser's. A user removed, or made a user again, is refused from the next request on.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from fluksio.engine.users import UserStore
from fluksio.errors import ConfigError
from tests.support.inprocess import InProcessEngine

USER, USER_PASSWORD = "ada", "ada-password-1"
USER_MAY = {
    ("GET", "/flows"),
    ("PUT", "/flows/{name}"),
    ("GET", "/flows/{name}"),
    ("DELETE", "/flows/{name}"),
    ("POST", "/flows/{name}/runs"),
    ("GET", "/runs"),
    ("GET", "/runs/{run_id}"),
    ("POST", "/runs/{run_id}/cancel"),
    ("DELETE", "/runs/{run_id}"),
    ("GET", "/runs/{run_id}/logs"),
    ("GET", "/runs/{run_id}/items"),
    ("POST", "/runs/{run_id}/items/cancel"),
    ("POST", "/runs/{run_id}/retry"),
    ("GET", "/events"),
    ("GET", "/workers"),
    ("GET", "/workers/resources"),
    ("PUT", "/artifacts"),
    ("GET", "/artifacts/{digest}"),
    ("POST", "/tokens"),
    ("GET", "/tokens"),
    ("POST", "/tokens/{token_id}/revoke"),
}
"""What a user who is not a superuser may call: the issue's list (and their own personal
tokens), written out once here."""


async def _operations(api: InProcessEngine) -> list[tuple[str, str, dict[str, Any]]]:
    document = (await api.request("GET", "/openapi.json")).body
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


async def _status(api: InProcessEngine, method: str, path: str, token: str | None) -> int:
    """The status of ``method path`` (any ``{name}`` filled in) called with ``token``;
    a stream's answer is not read past its head."""
    url = re.sub(r"\{[^}]+\}", "x", path)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with api.client.request(method, url, headers=headers) as answer:
        return answer.status


async def test_every_route_admits_the_role_it_declares_and_no_other(api: InProcessEngine) -> None:
    UserStore(api.database).add(USER, USER_PASSWORD, is_superuser=False)
    user, superuser = await api.login(USER, USER_PASSWORD), await api.login()
    walked = []
    for method, full_path, operation in await _operations(api):
        path = full_path.removeprefix("/api/v1")
        if not operation["security"] or path == "/workers/attach":
            continue  # open to anyone; the socket is a worker's, walked in test_workers
        role = operation.get("x-fluksio-role")
        if (method, path) in USER_MAY:
            assert role in ("user", None), (method, path, role)
        anonymous = await _status(api, method, full_path, None)
        as_user = await _status(api, method, full_path, user)
        as_superuser = await _status(api, method, full_path, superuser)
        assert anonymous == 401, (method, path, anonymous)
        if (method, path) in USER_MAY:
            assert as_user not in (401, 403), (method, path, as_user)
        elif role == "superuser" or "scrapeToken" in str(operation["security"]):
            assert as_user == 403, (method, path, as_user)
        else:
            assert as_user == 401, (method, path, as_user)  # a worker's token is wanted
        if role is not None or "scrapeToken" in str(operation["security"]):
            assert as_superuser not in (401, 403), (method, path, as_superuser)
        walked.append((method, path))
    assert set(walked) >= USER_MAY
    assert ("POST", "/workers/tokens") in walked and ("PUT", "/secrets/{name}") in walked


async def test_a_user_removed_or_demoted_is_refused_at_the_next_request(
    api: InProcessEngine,
) -> None:
    users = UserStore(api.database)
    users.add("bo", "bo-password-12", is_superuser=True)
    token = await api.login("bo", "bo-password-12")
    assert await _status(api, "GET", "/api/v1/workers/tokens", token) == 200
    users.set_superuser("bo", False)
    assert await _status(api, "GET", "/api/v1/workers/tokens", token) == 403
    assert await _status(api, "GET", "/api/v1/runs", token) == 200
    users.remove("bo")
    refused = await api.request("GET", "/runs", token=token)
    assert refused.status == 401
    assert "no longer exists" in refused.body["detail"]


async def test_the_last_superuser_cannot_be_removed_or_demoted(api: InProcessEngine) -> None:
    users = UserStore(api.database)
    (only,) = [u.username for u in users.all() if u.is_superuser]
    for leave in (lambda: users.remove(only), lambda: users.set_superuser(only, False)):
        with pytest.raises(ConfigError, match="the only superuser; make another one first"):
            leave()
    assert [u.username for u in users.all() if u.is_superuser] == [only]
    users.add("second", "second-password", is_superuser=True)
    users.set_superuser(only, False)  # another superuser remains: allowed
    assert [u.username for u in users.all() if u.is_superuser] == ["second"]


async def test_a_personal_token_speaks_for_its_user_until_revoked(api: InProcessEngine) -> None:
    UserStore(api.database).add(USER, USER_PASSWORD, is_superuser=False)
    ada = await api.login(USER, USER_PASSWORD)
    minted = await api.request(
        "POST", "/tokens", json_body={"name": "nightly", "days": 30}, token=ada
    )
    assert minted.status == 201, minted.body
    token, token_id = minted.body["token"], minted.body["id"]
    assert token.startswith("fpt_")
    assert await _status(api, "GET", "/api/v1/runs", token) == 200
    assert await _status(api, "GET", "/api/v1/workers/tokens", token) == 403, "a user's role"
    listed = (await api.request("GET", "/tokens", token=ada)).body
    assert [(t["name"], t["status"]) for t in listed] == [("nightly", "active")]
    assert "token" not in listed[0], "never its text again"
    stored = api.database.execute("SELECT * FROM personal_tokens").fetchall()
    assert all(token not in [str(v) for v in tuple(row)] for row in stored)
    # Another user's token is not hers to see or revoke; a superuser may revoke it.
    others = await api.request("POST", f"/tokens/{token_id}/revoke", token=await api.login())
    assert others.status == 200 and others.body["status"] == "revoked"
    refused = await api.request("GET", "/runs", token=token)
    assert refused.status == 401
    assert refused.body["detail"] == "personal token 'nightly' is revoked"


async def test_a_users_tokens_are_its_own(api: InProcessEngine) -> None:
    users = UserStore(api.database)
    users.add(USER, USER_PASSWORD, is_superuser=False)
    users.add("bo", "bo-password-12", is_superuser=False)
    ada, bo = await api.login(USER, USER_PASSWORD), await api.login("bo", "bo-password-12")
    minted = (await api.request("POST", "/tokens", json_body={"name": "a"}, token=ada)).body
    assert (await api.request("GET", "/tokens", token=bo)).body == []
    stolen = await api.request("POST", f"/tokens/{minted['id']}/revoke", token=bo)
    assert stolen.status == 404
    bad = await api.request("POST", "/tokens", json_body={"name": "a", "days": 400}, token=ada)
    assert bad.status == 422 and "days" in bad.body["detail"]
    users.remove(USER)
    gone = await api.request("GET", "/runs", token=minted["token"])
    assert gone.status == 401
    assert gone.body["detail"] == "the user this personal token was issued to no longer exists"
