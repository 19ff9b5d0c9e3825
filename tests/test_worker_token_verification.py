"""Forged and bad tokens are refused by the one verifier, with a sentence saying why.

``GET /workers/tokens/self`` takes a worker token; ``GET /workers/tokens`` takes a
superuser access token. Tokens are forged with the engine's own key where the point is a
claim, and with other keys or algorithms where the point is the signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support.cli import fluksio
from tests.support.engine import EngineProcess, start_engine
from tests.support.http import call

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def minted(shared_engine: EngineProcess) -> dict[str, Any]:
    token = shared_engine.login()
    return {"access": token, **shared_engine.mint(token, "gpu-dev", ["gpu"])}


def _engine_key(engine: EngineProcess) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(
        (engine.data_dir / "signing_key.pem").read_bytes(), password=None
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


def _self(engine: EngineProcess, token: str) -> tuple[int, str]:
    answer = call("GET", f"{engine.api}/workers/tokens/self", token=token)
    return answer.status, answer.detail


def test_a_genuine_worker_token_verifies(
    shared_engine: EngineProcess, minted: dict[str, Any]
) -> None:
    answer = call("GET", f"{shared_engine.api}/workers/tokens/self", token=minted["token"])
    assert answer.status == 200
    assert answer.body["name"] == "gpu-dev" and answer.body["labels"] == ["gpu"]


def test_signed_by_another_key(shared_engine: EngineProcess, minted: dict[str, Any]) -> None:
    forged = jwt.encode(_claims(minted), Ed25519PrivateKey.generate(), algorithm="EdDSA")
    status, detail = _self(shared_engine, forged)
    assert status == 401 and "signature" in detail


def test_alg_none(shared_engine: EngineProcess, minted: dict[str, Any]) -> None:
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    forged = f"{header}.{_b64(json.dumps(_claims(minted)).encode())}."
    assert _self(shared_engine, forged)[0] == 401


def test_hs256_keyed_with_the_public_key(
    shared_engine: EngineProcess, minted: dict[str, Any]
) -> None:
    public_pem = (
        _engine_key(shared_engine)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signing_input = (
        f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}."
        f"{_b64(json.dumps(_claims(minted)).encode())}"
    )
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    assert _self(shared_engine, f"{signing_input}.{_b64(signature)}")[0] == 401


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
def test_claims_the_verifier_requires(
    shared_engine: EngineProcess,
    minted: dict[str, Any],
    changes: dict[str, Any],
    expected: str,
) -> None:
    forged = jwt.encode(_claims(minted, **changes), _engine_key(shared_engine), algorithm="EdDSA")
    status, detail = _self(shared_engine, forged)
    assert status == 401
    assert expected in detail


def test_access_token_is_not_a_worker_token_and_the_reverse(
    shared_engine: EngineProcess, minted: dict[str, Any]
) -> None:
    status, detail = _self(shared_engine, minted["access"])
    assert status == 401 and "worker token is needed" in detail
    answer = call("GET", f"{shared_engine.api}/workers/tokens", token=minted["token"])
    assert answer.status == 401 and "access token is needed" in answer.detail


@pytest.mark.parametrize(
    "garbage",
    ["x", "a.b.c", "eyJ.eyJ.", "Bearer", "\u00e9t\u00e9", "." * 50, "A" * 5000],
    ids=["short", "dots", "empty-parts", "word", "non-ascii", "only-dots", "huge"],
)
def test_garbage_strings(shared_engine: EngineProcess, garbage: str) -> None:
    answer = call(
        "GET",
        f"{shared_engine.api}/workers/tokens/self",
        headers={"Authorization": f"Bearer {garbage}".encode().decode("latin-1")},
    )
    assert answer.status == 401
    assert answer.detail


def test_a_100_kb_header_is_refused_and_the_engine_keeps_serving(
    shared_engine: EngineProcess, minted: dict[str, Any]
) -> None:
    answer = call(
        "GET",
        f"{shared_engine.api}/workers/tokens/self",
        headers={"Authorization": "Bearer " + "A" * 100_000},
    )
    assert 400 <= answer.status < 500
    assert _self(shared_engine, minted["token"])[0] == 200


def test_revoked_token_is_refused_saying_so(
    shared_engine: EngineProcess, minted: dict[str, Any]
) -> None:
    other = shared_engine.mint(minted["access"], "pi-shed", ["relays"])
    assert _self(shared_engine, other["token"])[0] == 200
    first = call(
        "POST", f"{shared_engine.api}/workers/tokens/{other['jti']}/revoke", token=minted["access"]
    )
    again = call(
        "POST", f"{shared_engine.api}/workers/tokens/{other['jti']}/revoke", token=minted["access"]
    )
    assert first.status == again.status == 200
    assert first.body["revoked_at"] == again.body["revoked_at"], "revoking twice changes nothing"
    status, detail = _self(shared_engine, other["token"])
    assert status == 401 and "revoked" in detail
    unknown = call(
        "POST", f"{shared_engine.api}/workers/tokens/{'f' * 32}/revoke", token=minted["access"]
    )
    assert unknown.status == 404 and unknown.detail


@pytest.fixture
def rotating_engine(tmp_path: Path) -> Iterator[EngineProcess]:
    process = start_engine(tmp_path / "data", tmp_path / "logs")
    yield process
    process.stop()


def test_keys_rotate_invalidates_every_token_while_the_engine_runs(
    rotating_engine: EngineProcess,
) -> None:
    engine = rotating_engine
    access = engine.login()
    worker = engine.mint(access, "w1", [])
    assert _self(engine, worker["token"])[0] == 200

    done = fluksio("keys", "rotate", "--yes", "--data-dir", str(engine.data_dir))
    assert done.returncode == 0, done.stderr
    assert "1 worker token(s) revoked" in done.stdout

    assert _self(engine, worker["token"])[0] == 401
    assert call("GET", f"{engine.api}/workers/tokens", token=access).status == 401
    fresh = engine.login()
    listed = call("GET", f"{engine.api}/workers/tokens", token=fresh).body
    assert [(t["status"], t["revoked_reason"]) for t in listed] == [
        ("revoked", "signing key rotated")
    ]
