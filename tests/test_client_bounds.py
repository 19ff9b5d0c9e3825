"""Both Python clients, and their live feed, against a broken or hostile server: an answer
too large, endless, trickling, nested too deeply, or a redirect elsewhere. Each ends in
one sentence (``ClientError``), within its bounds, and no credential leaves the engine's
origin.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from fluksio.client import AsyncClient, Bounds, Client, ClientError, Redirected
from tests.support.hostile import (
    Reply,
    endless_chunks,
    fixed,
    head,
    hostile_server,
    trickle,
    trickle_until_closed,
)

TOKEN = "fpt_the-users-own-secret"
SMALL = Bounds(answer_bytes=1 << 20, within_s=1.0, per_mib_s=0.5, parsed_bytes=8 << 20)
"""Bounds a test can reach in a second: the defaults work the same, only larger."""


def _blocking(url: str, call: Callable[[Client], Any]) -> ClientError:
    with pytest.raises(ClientError) as raised:
        call(Client(url, token=TOKEN, bounds=SMALL))
    return raised.value


async def _awaited(url: str, call: Callable[[AsyncClient], Any]) -> ClientError:
    async with AsyncClient(url, token=TOKEN, bounds=SMALL) as client:
        with pytest.raises(ClientError) as raised:
            await call(client)
    return raised.value


def _gigabyte_declared(connection: socket.socket, _path: str) -> None:
    connection.sendall(
        head("200 OK", "Content-Type: application/json", "Content-Length: 1073741824")
    )
    connection.sendall(b"[" * 4096)


SCRIPTS: dict[str, tuple[Reply, str]] = {
    "declared 1 GiB": (_gigabyte_declared, "is 1073741824 bytes or more, over this client's bound"),
    "endless": (endless_chunks(64 << 20), "over this client's bound of 1048576 bytes"),
    "trickling body": (
        trickle(headers_first=True, every_s=0.1, most_s=30),
        "did not come whole within 1 s",
    ),
    "trickling headers": (
        trickle(headers_first=False, every_s=0.1, most_s=30),
        "did not come whole within 1 s",
    ),
    "trickling until closed": (
        trickle_until_closed(every_s=0.1, most_s=30),
        "did not come whole within 1 s",
    ),
    # 900 KiB, under the bound on bytes, would become some 30 MiB of empty dicts.
    "many empty objects": (
        fixed("200 OK", b"[" + b",".join([b"{}"] * 300_000) + b"]"),
        "would become about 30 MiB as Python objects, over this client's bound of 8 MiB",
    ),
    "deep JSON": (fixed("200 OK", b"[" * 200_000 + b"]" * 200_000), "GET /runs/r1"),
    "broken JSON": (fixed("200 OK", b'{"id": '), "GET /runs/r1"),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_blocking_client_gives_up_an_answer_in_one_sentence(script: str) -> None:
    reply, said = SCRIPTS[script]
    with hostile_server(reply) as server:
        refused = _blocking(server.url, lambda client: client.run("r1"))
    assert said in str(refused), refused
    assert "\n" not in str(refused)


@pytest.mark.parametrize("script", SCRIPTS)
async def test_the_async_client_gives_up_an_answer_in_one_sentence(script: str) -> None:
    reply, said = SCRIPTS[script]
    with hostile_server(reply) as server:
        refused = await _awaited(server.url, lambda client: client.run("r1"))
    assert said in str(refused), refused


def test_an_artifact_is_bounded_as_artifacts_are() -> None:
    # An artifact may be far larger than an answer: its own bound, not the answer's.
    body = b"x" * (2 << 20)
    with hostile_server(fixed("200 OK", body)) as server:
        client = Client(server.url, token=TOKEN, bounds=SMALL)
        with pytest.raises(ClientError, match="arrived as sha256:"):
            client.artifact("sha256:" + "0" * 64)  # read whole, then found not to match
        tight = Client(server.url, token=TOKEN, bounds=Bounds(artifact_bytes=1 << 20))
        with pytest.raises(ClientError, match="over this client's bound of 1048576 bytes"):
            tight.artifact("sha256:" + "0" * 64)


def _moved_to(elsewhere: str) -> Reply:
    def reply(connection: socket.socket, path: str) -> None:
        connection.sendall(head("302 Found", f"Location: {elsewhere}{path}", "Content-Length: 0"))

    return reply


def test_no_client_follows_a_redirect_or_sends_its_token_elsewhere() -> None:
    with (
        hostile_server(fixed("200 OK", b"{}")) as elsewhere,
        hostile_server(_moved_to(elsewhere.url)) as engine,
    ):
        refused = _blocking(engine.url, lambda client: client.run("r1"))
        assert isinstance(refused, Redirected)
        assert f"redirect (302) to {elsewhere.url}/api/v1/runs/r1" in str(refused), refused
        client = Client(engine.url, token=TOKEN, bounds=SMALL)
        with pytest.raises(Redirected):  # not asked again and again: at once
            next(iter(client.events()))
        assert [path for path, _ in engine.seen] == ["/api/v1/runs/r1", "/api/v1/events"]
        assert engine.seen[0][1]["authorization"] == f"Bearer {TOKEN}"
        assert elsewhere.seen == [], "the token went to another origin"


async def test_the_async_client_and_its_feed_follow_no_redirect() -> None:
    with (
        hostile_server(fixed("200 OK", b"{}")) as elsewhere,
        hostile_server(_moved_to(elsewhere.url)) as engine,
    ):
        refused = await _awaited(engine.url, lambda client: client.run("r1"))
        assert isinstance(refused, Redirected), refused
        async with AsyncClient(engine.url, token=TOKEN, bounds=SMALL) as client:
            with pytest.raises(Redirected):
                async for _event in client.events():
                    break
        assert elsewhere.seen == [], "the token went to another origin"


def _endless_line(connection: socket.socket, _path: str) -> None:
    connection.sendall(head("200 OK", "Content-Type: text/event-stream"))
    connection.sendall(b"data: ")
    for _ in range(100 << 20 >> 16):  # 100 MiB, never a newline
        connection.sendall(b"x" * (1 << 16))


def test_a_feed_line_without_end_is_given_up_not_held() -> None:
    with hostile_server(_endless_line) as server:
        client = Client(server.url, token=TOKEN)
        with pytest.raises(ClientError, match="over 67108864 bytes"):
            next(iter(client.events(reconnects=0)))


async def test_the_async_feed_gives_up_a_line_without_end() -> None:
    with hostile_server(_endless_line) as server:
        async with AsyncClient(server.url, token=TOKEN) as client:
            with pytest.raises(ClientError, match="over 67108864 bytes"):
                async for _event in client.events(reconnects=0):
                    break


def _one_heavy_event(connection: socket.socket, _path: str) -> None:
    """An event under the feed's bound on bytes whose data would become far more."""
    connection.sendall(head("200 OK", "Content-Type: text/event-stream"))
    connection.sendall(b"data: [" + b",".join([b"{}"] * 300_000) + b"]\n\n")
    time.sleep(5)


async def test_both_feeds_give_up_an_event_that_would_become_too_much() -> None:
    said = "would become about 30 MiB as Python objects, over this client's bound of 8 MiB"
    with hostile_server(_one_heavy_event) as server:
        client = Client(server.url, token=TOKEN, bounds=SMALL)
        with pytest.raises(ClientError, match=said):
            next(iter(client.events(reconnects=0)))
        async with AsyncClient(server.url, token=TOKEN, bounds=SMALL) as other:
            with pytest.raises(ClientError, match=said):
                async for _event in other.events(reconnects=0):
                    break


def _reads_slowly(connection: socket.socket, _path: str) -> None:
    """Takes the request's 3 MiB body in about 1.5 s, then answers."""
    left, until = 3 << 20, time.monotonic()
    while left > 0:
        got = len(connection.recv(min(left, 1 << 16)))
        left -= got
        until += got / (2 << 20)  # at 2 MiB a second
        time.sleep(max(0.0, until - time.monotonic()))
    connection.sendall(head("200 OK", "Content-Length: 2") + b"{}")


def test_an_upload_over_a_slow_link_is_given_the_time_its_bytes_need() -> None:
    # Within 1 s and 2 s per MiB moved: 3 MiB sent at 2 MiB/s take 1.5 s, inside 7.
    with hostile_server(_reads_slowly) as server:
        client = Client(server.url, token=TOKEN, bounds=Bounds(within_s=1.0, per_mib_s=2.0))
        answer = client.http.send("PUT", "/artifacts", b"x" * (3 << 20), "application/octet-stream")
    assert answer == b"{}"
