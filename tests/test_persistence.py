"""Restarting the engine on the same data directory loses nothing."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.client import SocketEngine
from tests.support.engine import engine_env, start_engine
from tests.support.wait import wait_for

pytestmark = pytest.mark.process


async def test_tokens_revocations_and_superuser_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_engine(data_dir, tmp_path / "logs1")
    try:
        async with SocketEngine(first.url) as api:
            api.token = access = await api.login()
            kept = await api.mint_token("kept", ["gpu"])
            gone = await api.mint_token("gone", ["cpu"])
            assert (
                await api.request("POST", f"/workers/tokens/{gone['jti']}/revoke")
            ).status == 200
    finally:
        # SIGKILL: no chance to flush anything on the way out.
        first.stop(signal.SIGKILL)

    # The environment no longer names a password: the stored superuser must be used.
    env = engine_env()
    env.pop("FLUKSIO_SUPERUSER_PASSWORD")
    second = start_engine(data_dir, tmp_path / "logs2", env=env)
    try:
        assert "Created the superuser" not in second.stdout()
        async with SocketEngine(second.url) as api:
            api.token = await api.login()
            listed = {t["name"]: t for t in (await api.request("GET", "/workers/tokens")).body}
            assert listed["kept"]["status"] == "active"
            assert listed["gone"]["status"] == "revoked"
            own = "/workers/tokens/self"
            assert (await api.request("GET", own, token=kept["token"])).status == 200
            assert (await api.request("GET", own, token=gone["token"])).status == 401
            # An access token from before the restart still verifies: same key, same user.
            assert (await api.request("GET", "/workers/tokens", token=access)).status == 200
    finally:
        second.stop()


def test_first_start_without_a_password_generates_one_and_prints_it_once(tmp_path: Path) -> None:
    env = engine_env()
    env.pop("FLUKSIO_SUPERUSER_PASSWORD")
    data_dir = tmp_path / "data"
    engine = start_engine(data_dir, tmp_path / "logs", env=env)
    try:
        # The banner may reach the log a moment after the engine answers (a loaded machine).
        lines = wait_for(
            lambda: [
                line for line in engine.stdout().splitlines() if "shown only this once" in line
            ],
            timeout=10,
            what="the first start's password banner",
        )
        assert len(lines) == 1
        password = lines[0].rsplit(": ", 1)[1]
        assert len(password) >= 16
        assert engine.login("admin", password)
        assert password not in engine.logs()
    finally:
        engine.stop()
    again = start_engine(data_dir, tmp_path / "logs", env=env)
    try:
        # Both engines' banners go to the same log: once the second's is there, its
        # password line would be too.
        wait_for(
            lambda: again.stdout().count("Fluksio engine listening") == 2,
            timeout=10,
            what="the second engine's banner",
        )
        assert again.stdout().count("shown only this once") == 1, "never printed a second time"
    finally:
        again.stop()
