"""Artifacts at their limits, in the test's process: an upload over the size limit is 413
and not kept, a full disk is 507 with a sentence while the engine serves on, and the ETag
is the digest, so an unchanged copy is not sent again."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process

FIFTY_MB = 50 * 1024 * 1024


async def test_an_upload_over_the_limit_is_refused_with_413_and_not_kept(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", max_artifact_bytes=1000)
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.put("/api/v1/artifacts?name=s", data=b"s" * 1000, headers=headers) as ok:
        assert ok.status == 201

    async def streamed() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(3):
            yield b"b" * 500

    async with api.client.put("/api/v1/artifacts?name=b", data=streamed(), headers=headers) as over:
        body = await over.json()
        assert over.status == 413 and "limit of 1000 bytes" in body["detail"]
        assert body["field"] == "body"
    digest = "sha256:" + hashlib.sha256(b"b" * 1500).hexdigest()
    assert (await api.request("HEAD", f"/artifacts/{digest}")).status == 404
    # Declared too large: refused before a byte of the body is read.
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        f"PUT /api/v1/artifacts?name=huge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer"
        f" {api.token}\r\nContent-Length: {10**12}\r\n\r\n".encode()
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.startswith(b"HTTP/1.1 413")
    writer.close()
    assert not list((tmp_path / "data" / "artifacts" / "tmp").iterdir())


async def test_a_full_disk_is_507_with_a_sentence_and_the_engine_serves_on(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: it must mount a small tmpfs to fill a disk")
        pytest.skip("filling a disk for real needs a tmpfs mount, as root")
    store = tmp_path / "data" / "artifacts"
    store.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(store)])
    assert mounted.returncode == 0
    try:
        api = await start_in_process(aiohttp_client, tmp_path / "data")
        headers = {"Authorization": f"Bearer {api.token}"}
        big = b"x" * (512 * 1024)
        async with api.client.put("/api/v1/artifacts?name=big", data=big, headers=headers) as full:
            body = await full.json()
            assert full.status == 507
            assert body["detail"] == (
                "the engine's disk has no room for the artifact (No space left on device);"
                " nothing was stored"
            )
        assert not list((store / "tmp").iterdir()), "nothing partial is left"
        small = b"fits"
        async with api.client.put("/api/v1/artifacts?name=s", data=small, headers=headers) as ok:
            assert ok.status == 201, "the engine keeps serving once there is room"
        assert (await api.request("GET", "/health")).status == 200
        await api.client.close()
    finally:
        subprocess.run(["umount", str(store)], check=True)


async def test_the_etag_is_the_digest_and_an_unchanged_copy_is_not_sent_again(
    api: InProcessEngine,
) -> None:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.put("/api/v1/artifacts?name=a", data=b"abc", headers=headers) as put:
        digest = (await put.json())["digest"]
    for method in ("GET", "HEAD"):
        async with api.client.request(
            method, f"/api/v1/artifacts/{digest}", headers=headers
        ) as got:
            assert got.status == 200 and got.headers["ETag"] == f'"{digest}"'
    ranged = {**headers, "Range": "bytes=1-"}
    async with api.client.get(f"/api/v1/artifacts/{digest}", headers=ranged) as part:
        assert part.status == 206 and await part.read() == b"bc"
        assert part.headers["ETag"] == f'"{digest}"'
    cached = {**headers, "If-None-Match": f'"{digest}"'}
    async with api.client.get(f"/api/v1/artifacts/{digest}", headers=cached) as again:
        assert again.status == 304 and await again.read() == b""
