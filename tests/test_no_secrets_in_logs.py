"""No token, password or secret value ever reaches a log line."""

from __future__ import annotations

import urllib.parse

import pytest

from tests.support.engine import SUPERUSER_PASSWORD, EngineProcess

pytestmark = pytest.mark.process


def test_logs_never_contain_tokens_or_passwords(engine: EngineProcess) -> None:
    access = engine.login()
    wrong_password = "hunter2-not-the-password"
    engine.client().request(
        "POST", "/login/access-token", form={"username": "admin", "password": wrong_password}
    )
    worker = engine.mint(access, "w", ["gpu"])["token"]
    # The published agent's way: the token in the query string.
    query = urllib.parse.urlencode({"token": worker})
    engine.client().request("GET", f"/workers/tokens/self?{query}")
    engine.client(worker).request("GET", "/workers/tokens/self")
    engine.client(worker).request("GET", f"/no/such/path?{query}")
    # A header too large for the parser, made of a real token.
    engine.client().request(
        "GET", "/workers/tokens/self", headers={"Authorization": "Bearer " + worker * 40}
    )
    engine.client(access).request("POST", f"/workers/tokens/{'0' * 32}/revoke")
    engine.stop()

    logs = engine.logs()
    assert "http.request" in logs, "the access log is on, so the test looks at real lines"
    for secret in (access, worker, SUPERUSER_PASSWORD, wrong_password):
        assert secret not in logs
    # Nor any recognisable piece of a token (its signature part).
    for token in (access, worker):
        assert token.rsplit(".", 1)[1][:20] not in logs
