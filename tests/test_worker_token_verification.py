"""Forged and bad tokens are refused by the one verifier, with a sentence saying why.

``GET /workers/tokens/self`` takes a worker token; ``GET /workers/tokens`` takes a
superuser access token. Tokens are forged with the engine's own key where the point is a
claim, and with other keys or algorithms where the point is the signature.

Written against :class:`~tests.support.client.EngineApi`: the engine's logic runs in the
test's process; rotating the keys of a running engine (a command acting on its data
directory) runs against an engine process, over the same interface.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support.cli import fluksio
from tests.support.client import EngineApi, SocketEngine
from tests.support.engine import start_engine
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process


@pytest.fixture
async def api(aiohttp_client: ClientFactory, tmp_path: Path) -> InProcessEngine:
    return await start_in_process(aiohttp_client, tmp_path / "data")


@pytest.fixture
async def minted(api: InProcessEngine) -> dict[str, Any]:
    return {"access": api.token, **await api.mint_token("gpu-dev", ["gpu"])}


def _engine_key(data_dir: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(
        (data_dir / "signing_key.pem").read_bytes(), password=None
    )
    assert isinstance(key, Ed25519PrivateKey)
    return key


def _claims(minted: dict[str, Any], **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": minted["name"],
        "type": "worker",
        "labels": minted["labels"],
        "jti": minted["jti"],
        "iat": now,
        "exp": now + 3600,
    }
    for name, value in changes.items():
        if value is None:
            claims.pop(name, None)
        else:
            claims[name] = value
    return claims


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def _self(api: EngineApi, token: str) -> tuple[int, str]:
    answer = await api.request("GET", "/workers/tokens/self", token=token)
    return answer.status, answer.detail


async def test_a_genuine_worker_token_verifies(
    api: InProcessEngine, minted: dict[str, Any]
) -> None:
    answer = await api.request("GET", "/workers/tokens/self", token=minted["token"])
    assert answer.status == 200
    assert answer.body["name"] == "gpu-dev" and answer.body["labels"] == ["gpu"]


async def test_signed_by_another_key(api: InProcessEngine, minted: dict[str, Any]) -> None:
    forged = jwt.encode(_claims(minted), Ed25519PrivateKey.generate(), algorithm="EdDSA")
    status, detail = await _self(api, forged)
    assert status == 401 and "signature" in detail


async def test_alg_none(api: InProcessEngine, minted: dict[str, Any]) -> None:
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    forged = f"{header}.{_b64(json.dumps(_claims(minted)).encode())}."
    assert (await _self(api, forged))[0] == 401


async def test_hs256_keyed_with_the_public_key(
    api: InProcessEngine, minted: dict[str, Any]
) -> None:
    public_pem = (
        _engine_key(api.engine.layout.root)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signing_input = (
        f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}."
        f"{_b64(json.dumps(_claims(minted)).encode())}"
    )
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    assert (await _self(api, f"{signing_input}.{_b64(signature)}"))[0] == 401


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"exp": int(time.time()) - 10}, "expired"),
        ({"jti": None}, "mint a new one"),
        ({"labels": None}, "mint a new one"),
        ({"jti": "0" * 32}, "unknown to this engine"),
        ({"type": "access"}, "worker token is needed"),
        ({"exp": None}, "'exp'"),
    ],
    ids=["expired", "no-jti", "no-labels", "unknown-jti", "access-type", "no-exp"],
)
async def test_claims_the_verifier_requires(
    api: InProcessEngine,
    minted: dict[str, Any],
    changes: dict[str, Any],
    expected: str,
) -> None:
    forged = jwt.encode(
        _claims(minted, **changes), _engine_key(api.engine.layout.root), algorithm="EdDSA"
    )
    status, detail = await _self(api, forged)
    assert status == 401
    assert expected in detail


@pytest.mark.parametrize(
    "case",
    [
        ("worker", "iat", 3600, False),
        ("worker", "nbf", 3600, False),
        ("worker", "iat", 30, True),  # within the stated skew
        ("access", "iat", 3600, False),
        ("artifact", "nbf", 3600, False),
    ],
    ids=lambda case: "-".join(map(str, case)),
)
async def test_a_token_dated_in_the_future_is_refused_past_a_minutes_skew(
    api: InProcessEngine, minted: dict[str, Any], case: tuple[str, str, int, bool]
) -> None:
    """RFC 8725: a validly signed token whose iat or nbf lies ahead of the engine's clock
    (by more than 60 s) is not trusted, whatever its kind."""
    kind, claim, ahead_s, accepted = case
    now = int(time.time())
    claims = {**_claims(minted), claim: now + ahead_s, "exp": now + 7200}
    path = "/workers/tokens/self"
    if kind == "access":
        claims.update(sub="admin", type="access")
        path = "/workers/tokens"
    elif kind == "artifact":
        claims.update(type="artifact", worker_jti=minted["jti"])
        path = "/artifacts/sha256:" + "0" * 64
    forged = jwt.encode(claims, _engine_key(api.engine.layout.root), algorithm="EdDSA")
    answer = await api.request("GET", path, token=forged)
    if accepted:
        assert answer.status == 200, answer.detail
        return
    assert answer.status == 401, (answer.status, answer.detail)
    assert answer.detail == (
        f"the {kind} token is dated in the future (more than 60 s ahead of this engine's"
        " clock): mint a new one"
    )


async def test_access_token_is_not_a_worker_token_and_the_reverse(
    api: InProcessEngine, minted: dict[str, Any]
) -> None:
    status, detail = await _self(api, minted["access"])
    assert status == 401 and "worker token is needed" in detail
    answer = await api.request("GET", "/workers/tokens", token=minted["token"])
    assert answer.status == 401 and "access token is needed" in answer.detail


@pytest.mark.parametrize(
    "garbage",
    ["x", "a.b.c", "eyJ.eyJ.", "Bearer", "\u00e9t\u00e9", "." * 50, "A" * 5000],
    ids=["short", "dots", "empty-parts", "word", "non-ascii", "only-dots", "huge"],
)
async def test_garbage_strings(api: InProcessEngine, garbage: str) -> None:
    answer = await api.request(
        "GET",
        "/workers/tokens/self",
        headers={"Authorization": f"Bearer {garbage}".encode().decode("latin-1")},
    )
    assert answer.status == 401
    assert answer.detail


async def test_a_100_kb_header_is_refused_and_the_engine_keeps_serving(
    api: InProcessEngine, minted: dict[str, Any]
) -> None:
    answer = await api.request(
        "GET", "/workers/tokens/self", headers={"Authorization": "Bearer " + "A" * 100_000}
    )
    assert 400 <= answer.status < 500
    assert (await _self(api, minted["token"]))[0] == 200


async def test_revoked_token_is_refused_saying_so(
    api: InProcessEngine, minted: dict[str, Any]
) -> None:
    other = await api.mint_token("pi-shed", ["relays"])
    assert (await _self(api, other["token"]))[0] == 200
    first = await api.request("POST", f"/workers/tokens/{other['jti']}/revoke")
    again = await api.request("POST", f"/workers/tokens/{other['jti']}/revoke")
    assert first.status == again.status == 200
    assert first.body["revoked_at"] == again.body["revoked_at"], "revoking twice changes nothing"
    status, detail = await _self(api, other["token"])
    assert status == 401 and "revoked" in detail
    unknown = await api.request("POST", f"/workers/tokens/{'f' * 32}/revoke")
    assert unknown.status == 404 and unknown.detail


@pytest.fixture
async def rotating_engine(tmp_path: Path) -> AsyncIterator[tuple[SocketEngine, Path]]:
    process = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        async with SocketEngine(process.url) as api:
            api.token = await api.login()
            yield api, process.data_dir
    finally:
        process.stop()


@pytest.mark.process
async def test_keys_rotate_invalidates_every_signed_token_while_the_engine_runs(
    rotating_engine: tuple[SocketEngine, Path],
) -> None:
    api, data_dir = rotating_engine
    access = api.token
    worker = await api.mint_token("w1", [])
    assert (await _self(api, worker["token"]))[0] == 200
    minted = await api.request("POST", "/tokens", json_body={"name": "cron", "days": 7})
    personal = minted.body["token"]

    done = fluksio("keys", "rotate", "--yes", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "1 worker token(s) revoked" in done.stdout
    # What it says is what happens: a personal API token, which the key never signed, is
    # its user's own credential and keeps working until revoked.
    assert "personal API tokens keep working" in done.stdout, done.stdout
    assert (await api.request("GET", "/workers/tokens", token=personal)).status == 200

    assert (await _self(api, worker["token"]))[0] == 401
    assert (await api.request("GET", "/workers/tokens", token=access)).status == 401
    fresh = await api.login()
    listed = (await api.request("GET", "/workers/tokens", token=fresh)).body
    assert [(t["status"], t["revoked_reason"]) for t in listed] == [
        ("revoked", "signing key rotated")
    ]
