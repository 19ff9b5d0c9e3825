"""Who may do what: superuser endpoints, login answers, and the slowdown after failures."""

from __future__ import annotations

import time

import pytest

from tests.support.cli import fluksio
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD, EngineProcess
from tests.support.http import call
from tests.support.wait import wait_for

SUPERUSER_ENDPOINTS = [
    ("POST", "/workers/tokens", {"name": "w", "labels": []}),
    ("GET", "/workers/tokens", None),
    ("POST", "/workers/tokens/0123/revoke", None),
]


def _add_user(engine: EngineProcess, name: str, password: str) -> None:
    done = fluksio(
        "users",
        "add",
        name,
        "--password-stdin",
        "--data-dir",
        str(engine.data_dir),
        stdin=password + "\n",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("method", "path", "body"), SUPERUSER_ENDPOINTS)
def test_unauthenticated_is_401_and_non_superuser_is_403(
    shared_engine: EngineProcess, method: str, path: str, body: object
) -> None:
    anonymous = call(method, f"{shared_engine.api}{path}", json_body=body)
    assert anonymous.status == 401 and "bearer token" in anonymous.detail
    assert anonymous.headers.get("WWW-Authenticate") == "Bearer"

    _add_user_once(shared_engine)
    plain = shared_engine.login("alice", "alice-password")
    forbidden = call(method, f"{shared_engine.api}{path}", json_body=body, token=plain)
    assert forbidden.status == 403 and "not a superuser" in forbidden.detail


def _add_user_once(engine: EngineProcess) -> None:
    if (
        call(
            "POST",
            f"{engine.api}/login/access-token",
            form={"username": "alice", "password": "alice-password"},
        ).status
        != 200
    ):
        _add_user(engine, "alice", "alice-password")


def test_unknown_user_and_wrong_password_get_the_same_answer(engine: EngineProcess) -> None:
    unknown = call(
        "POST", f"{engine.api}/login/access-token", form={"username": "nobody", "password": "x"}
    )
    wrong = call(
        "POST", f"{engine.api}/login/access-token", form={"username": SUPERUSER, "password": "x"}
    )
    assert unknown.status == wrong.status == 401
    assert unknown.body == wrong.body == {"detail": "incorrect username or password"}


def test_missing_form_field_names_it(engine: EngineProcess) -> None:
    answer = call("POST", f"{engine.api}/login/access-token", form={"username": SUPERUSER})
    assert answer.status == 422
    assert answer.body == {"detail": "password: is required", "field": "password"}


def test_repeated_failures_are_slowed_down_then_allowed_again(engine: EngineProcess) -> None:
    url = f"{engine.api}/login/access-token"
    for _ in range(5):
        assert call("POST", url, form={"username": SUPERUSER, "password": "guess"}).status == 401
    blocked = call("POST", url, form={"username": SUPERUSER, "password": SUPERUSER_PASSWORD})
    assert blocked.status == 429
    assert "too many failed logins" in blocked.detail
    assert int(blocked.headers["Retry-After"]) >= 1

    started = time.monotonic()
    answer = wait_for(
        lambda: (
            a
            if (
                a := call("POST", url, form={"username": SUPERUSER, "password": SUPERUSER_PASSWORD})
            ).status
            != 429
            else None
        ),
        timeout=10,
        interval=0.2,
        what="the login slowdown to pass",
    )
    assert answer.status == 200
    assert time.monotonic() - started < 10


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
def test_mint_validation_names_the_field(
    shared_engine: EngineProcess, body: dict[str, object], field: str
) -> None:
    token = shared_engine.login()
    answer = call("POST", f"{shared_engine.api}/workers/tokens", token=token, json_body=body)
    assert answer.status == 422
    assert answer.body["field"] == field
    assert answer.detail.startswith(f"{field}: ")
    assert call("GET", f"{shared_engine.api}/workers/tokens", token=token).body == [], (
        "a refused mint stores nothing"
    )


def test_mint_with_invalid_json_is_a_clear_4xx(shared_engine: EngineProcess) -> None:
    token = shared_engine.login()
    answer = call(
        "POST",
        f"{shared_engine.api}/workers/tokens",
        token=token,
        headers={"Content-Type": "application/json"},
        json_body=None,
    )
    assert answer.status == 422 and answer.body["field"] == "body"


def test_duplicate_labels_are_folded(shared_engine: EngineProcess) -> None:
    token = shared_engine.login()
    minted = shared_engine.mint(token, "dupes", ["gpu", "cuda12", "gpu"])
    assert minted["labels"] == ["gpu", "cuda12"]
    call("POST", f"{shared_engine.api}/workers/tokens/{minted['jti']}/revoke", token=token)
