"""The spec's own curl sequence, run with real curl against a real engine, as written."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD, EngineProcess

pytestmark = pytest.mark.process


def _sh(script: str, **env: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def test_login_mint_list_revoke_as_the_spec_shows(engine: EngineProcess) -> None:
    api = engine.api
    login = json.loads(
        _sh(
            'curl -s -X POST "$API_URL/login/access-token"'
            ' -d "username=$U" --data-urlencode "password=$P"',
            API_URL=api,
            U=SUPERUSER,
            P=SUPERUSER_PASSWORD,
        )
    )
    assert login["token_type"] == "bearer"
    token = login["access_token"]

    minted = json.loads(
        _sh(
            """curl -s -X POST "$API_URL/workers/tokens" \\
  -H "Authorization: Bearer $TOKEN" \\
  -H 'Content-Type: application/json' \\
  -d '{"name": "gpu-dev", "labels": ["gpu", "cuda12"]}'""",
            API_URL=api,
            TOKEN=token,
        )
    )
    assert minted["name"] == "gpu-dev"
    assert minted["labels"] == ["gpu", "cuda12"]
    assert minted["token"] and minted["jti"] and minted["expires_at"]

    listed = json.loads(
        _sh(
            'curl -s "$API_URL/workers/tokens" -H "Authorization: Bearer $TOKEN"',
            API_URL=api,
            TOKEN=token,
        )
    )
    assert [(t["jti"], t["status"]) for t in listed] == [(minted["jti"], "active")]
    assert "token" not in listed[0], "the token text is returned once and never again"

    revoked = json.loads(
        _sh(
            """curl -s -X POST "$API_URL/workers/tokens/$JTI/revoke" \\
  -H "Authorization: Bearer $TOKEN\"""",
            API_URL=api,
            TOKEN=token,
            JTI=minted["jti"],
        )
    )
    assert revoked["status"] == "revoked"
    self_check = _sh(
        'curl -s -o /dev/null -w "%{http_code}" "$API_URL/workers/tokens/self"'
        ' -H "Authorization: Bearer $WT"',
        API_URL=api,
        WT=minted["token"],
    )
    assert self_check == "401"
