"""A checkpoint names only state its own call saved (issue 65, item 1): a hostile worker
naming another run's artifact, a digest never uploaded, or a reference with a size of its
own is refused with the reason, and the next attempt is never handed those bytes. A call's
credential is its own: another call's, or one whose binding was altered, saves nothing
as it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.wait import async_wait_for

NODE = "def process():\n    return 1\n"


async def _upload(api: InProcessEngine, data: bytes, token: str | None = None) -> Any:
    return await api.request("PUT", "/artifacts?name=s", data=data, token=token)


async def _one_call(aiohttp_client: ClientFactory, tmp_path: Path) -> Any:
    api = await start_in_process(aiohttp_client, tmp_path / "d")
    node = {"id": "n", "code": NODE, "worker": "box", "max_checkpoints": 3}
    await api.put_flow("f", [node])
    token = await api.mint("box", ["box"])
    worker = await api.attach(token, name="box", labels=["box"], parallel=2)
    run = await api.start_run("f")
    call = await worker.next_call()
    return api, worker, run["id"], call


def _token_of(call: dict[str, Any]) -> str:
    return str(call["env"]["FLUKSIO_ARTIFACT_TOKEN"])


async def test_another_runs_artifact_as_a_checkpoint_is_refused_and_never_given_back(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, worker, run_id, call = await _one_call(aiohttp_client, tmp_path)
    private = (await _upload(api, b"another run's private bytes")).body
    # Before, this was taken: the next attempt got the other run's bytes to restore.
    await worker.checkpointed(call["call_id"], {**private})
    ended = nodes_of(await api.wait_run(run_id))["n"]
    assert ended["state"] == "failed"
    assert "the checkpoint was refused" in ended["error"]["message"]
    assert "was not uploaded by this call" in ended["error"]["message"]
    assert [c for c in worker.calls if c != call["call_id"]] == [], "no attempt restored it"


async def test_a_digest_never_uploaded_or_a_size_of_its_own_is_refused(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, worker, run_id, call = await _one_call(aiohttp_client, tmp_path)
    never = "sha256:" + hashlib.sha256(b"never sent").hexdigest()
    # A key no artifact reference has is not kept, and lends the reference nothing.
    await worker.checkpointed(call["call_id"], {"digest": never, "size": 2**62, "x": 1})
    message = nodes_of(await api.wait_run(run_id))["n"]["error"]["message"]
    assert f"its state {never} was not uploaded by this call" in message


async def test_state_the_call_uploaded_itself_is_given_to_its_next_attempt(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, worker, run_id, call = await _one_call(aiohttp_client, tmp_path)
    saved = await _upload(api, b"my own state", token=_token_of(call))
    assert saved.status == 201, saved.body
    lied = {**saved.body, "size": saved.body["size"] + 1}
    await worker.checkpointed(call["call_id"], lied)
    # A size of its own is refused even for its own upload.
    message = nodes_of(await api.wait_run(run_id))["n"]["error"]["message"]
    assert f"is {saved.body['size']} bytes, not the {lied['size']} named" in message
    run = await api.start_run("f")
    second = await worker.next_call()
    saved = await _upload(api, b"my own state", token=_token_of(second))  # already held
    await worker.checkpointed(second["call_id"], saved.body)
    again = await worker.next_call()
    restored = again["restored"]
    assert restored["digest"] == saved.body["digest"]
    await worker.answer(again["call_id"], "resumed")
    assert nodes_of(await api.wait_run(run["id"]))["n"]["result"] == "resumed"


async def test_one_calls_credential_saves_nothing_as_another_and_a_forged_binding_is_refused(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, worker, run_id, call = await _one_call(aiohttp_client, tmp_path)
    other = await api.start_run("f")
    other_call = await async_wait_for(
        lambda: next((c for i, c in worker.calls.items() if i != call["call_id"]), None),
        timeout=5,
        what="the other run's call",
    )
    by_other = await _upload(api, b"the other call's", token=_token_of(other_call))
    await worker.checkpointed(call["call_id"], by_other.body)
    message = nodes_of(await api.wait_run(run_id))["n"]["error"]["message"]
    assert "was not uploaded by this call" in message
    base, _call, mac = _token_of(other_call).rsplit("~", 2)
    forged = f"{base}~{call['call_id']}~{mac}"
    refused = await _upload(api, b"forged", token=forged)
    assert refused.status == 401, refused.body
    await worker.answer(other_call["call_id"], "done")
    assert (await api.wait_run(other["id"]))["state"] == "succeeded"
