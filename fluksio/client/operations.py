"""The engine's API, written once for both clients: a method per request, and the
operations of several requests as steps (see :mod:`fluksio.client.request`).

Every answer is read with the model the engine made it from (``fluksio.wire.answers``,
the models the OpenAPI document is made from), so a field renamed on one side fails the
type check on the other, and an answer of another version is one sentence.
"""

from __future__ import annotations

import dataclasses
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluksio.client.errors import ClientError
from fluksio.client.request import Operation, Request, Steps, bytes_checked, json_request
from fluksio.wire.answers.flows import FlowBody, FlowSummary
from fluksio.wire.answers.resources import ArtifactRef, Deleted, Health, SecretBody
from fluksio.wire.answers.runs import ItemsPage, NodeLogs, RunBody, RunSummary
from fluksio.wire.answers.tokens import (
    AccessToken,
    MintedPersonalToken,
    MintedScrapeToken,
    MintedToken,
    PersonalTokenBody,
    ScrapeTokenBody,
    WorkerTokenBody,
)
from fluksio.wire.answers.workers import (
    ProfileBody,
    RefusedWorkerBody,
    ResourcesBody,
    WorkerBody,
)
from fluksio.wire.states import TERMINAL_RUN_STATES

if TYPE_CHECKING:  # its models are built on first use: a command that sends none saves it
    from pydantic import BaseModel

    from fluksio.wire.flows import NodeSettings, NodeSpec

__all__ = [
    "Credentials",
    "Operations",
    "api_url",
    "credentials",
    "executor_node",
    "login_form",
    "node_json",
    "run_end",
]

LONGEST_WAIT_S = 60
"""The longest an engine holds one answer (``?wait=``); longer waits ask again."""


def node_json(node: BaseModel | Mapping[str, object]) -> dict[str, object]:
    """A node (or a part of one) as the engine reads it: a model with only the fields it
    was given."""
    if isinstance(node, Mapping):
        return dict(node)
    dumped: dict[str, object] = node.model_dump(mode="json", exclude_unset=True)
    return dumped


_EXECUTORS_OWN = ("after", "params", "items", "items_from")
"""Node settings an executor sets itself, for each call or map."""


def executor_node(node: NodeSettings | None, named: Mapping[str, Any]) -> dict[str, Any]:
    """The settings every node of an executor shares, as the engine reads them: ``node``,
    or the same given by name (``policy`` for ``worker_policy``; ``container`` also as
    just its image). Checked as the engine will check them: a ``ValueError`` naming the
    first one it would refuse."""
    from pydantic import ValidationError  # noqa: PLC0415 - only for the executor

    from fluksio.validation import one_sentence  # noqa: PLC0415
    from fluksio.wire.flows import NodeSettings  # noqa: PLC0415 - its models built on first use

    if node is not None and named:
        raise ValueError(f"executor: give {', '.join(named)} in the NodeSettings, or all by name")
    if node is None:
        given = dict(named)
        if "policy" in given:
            given["worker_policy"] = given.pop("policy")
        if isinstance(given.get("container"), str):
            given["container"] = {"image": given["container"]}
        try:
            node = NodeSettings.model_validate(given)
        except ValidationError as refused:
            raise ValueError(one_sentence(refused, whole="executor")) from None
    for own in _EXECUTORS_OWN:
        if own in node.model_fields_set:
            raise ValueError(f"{own}: the executor sets it for each call; leave it out")
    return node.model_dump(mode="json", exclude_unset=True)


class Operations:
    """The methods of :class:`~fluksio.client.client.Client` and of
    :class:`~fluksio.client.async_client.AsyncClient` that are one request each (on the
    async client, each returns an awaitable of the same answer)."""

    # -- the engine ------------------------------------------------------------------------

    @Operation
    def health() -> Request[Health]:
        return json_request(Health, "GET", "/health")

    # -- flows and runs --------------------------------------------------------------------

    @Operation
    def put_flow(
        name: str, nodes: Sequence[NodeSpec | Mapping[str, object]], *, transient: bool = False
    ) -> Request[FlowBody]:
        """Create or replace flow ``name``: each node a :class:`~fluksio.wire.flows.NodeSpec`
        (checked as it is made), or a dict as ``PUT /flows/{name}`` takes; ``transient``:
        the retention deletes it once no kept run is of it."""
        query = {"transient": "true"} if transient else {}
        sent = [node_json(node) for node in nodes]
        return json_request(FlowBody, "PUT", f"/flows/{name}", {"nodes": sent}, **query)

    @Operation
    def flow(name: str) -> Request[FlowBody]:
        return json_request(FlowBody, "GET", f"/flows/{name}")

    @Operation
    def flows() -> Request[list[FlowSummary]]:
        return json_request(list[FlowSummary], "GET", "/flows")

    @Operation
    def delete_flow(name: str) -> Request[Deleted]:
        return json_request(Deleted, "DELETE", f"/flows/{name}")

    @Operation
    def start_run(flow: str, params: dict[str, object] | None = None) -> Request[RunBody]:
        """Start a run of ``flow``; ``params`` as its nodes read them."""
        return json_request(RunBody, "POST", f"/flows/{flow}/runs", {"params": params or {}})

    @Operation
    def run(run_id: str) -> Request[RunBody]:
        return json_request(RunBody, "GET", f"/runs/{run_id}")

    @Operation
    def items(
        run_id: str,
        node: str | None = None,
        *,
        after: int = -1,
        limit: int = 1000,
        state: str | None = None,
    ) -> Request[ItemsPage]:
        """A page of an array's items after position ``after`` (the last page's
        ``next``), ``limit`` at most; ``state``: only the stored items in it."""
        query = {"node": node, "after": after, "limit": limit, "state": state}
        return json_request(ItemsPage, "GET", f"/runs/{run_id}/items", **query)

    @Operation
    def cancel_items(run_id: str, items: list[int], node: str | None = None) -> Request[RunBody]:
        """Cancel chosen items (by position) of a live run's array."""
        body = {"items": items, "node": node}
        return json_request(RunBody, "POST", f"/runs/{run_id}/items/cancel", body)

    @Operation
    def retry_run(run_id: str) -> Request[RunBody]:
        """Run a failed run's failed nodes and array items again, in it (each a new
        attempt)."""
        return json_request(RunBody, "POST", f"/runs/{run_id}/retry")

    @Operation
    def cancel_run(run_id: str, *, wait: int = 0) -> Request[RunBody]:
        """Cancel a run; ``wait``: hold the answer up to that many seconds (at most 60)
        until what it executes has been stopped."""
        return json_request(RunBody, "POST", f"/runs/{run_id}/cancel", wait=wait or None)

    @Operation
    def delete_run(run_id: str) -> Request[Deleted]:
        """Delete an ended run (its artifacts go once nothing kept refers to them)."""
        return json_request(Deleted, "DELETE", f"/runs/{run_id}")

    @Operation
    def runs(
        *,
        flow: str | None = None,
        state: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> Request[list[RunSummary]]:
        """The newest runs (``limit``, 100 by default), of ``flow``, in ``state``, created at
        ``since`` (a time with its zone) or after."""
        at = since.isoformat() if since is not None else None
        query = {"flow": flow, "state": state, "since": at, "limit": limit}
        return json_request(list[RunSummary], "GET", "/runs", **query)

    @Operation
    def logs(
        run_id: str,
        node: str | None = None,
        *,
        item: int | None = None,
        start: int = 0,
        attempt: int | None = None,
        wait: int = 0,
    ) -> Request[NodeLogs]:
        """A node's output lines from position ``start`` (the last answer's ``next``), of
        its latest attempt or ``attempt``; ``wait``: hold the answer up to that many
        seconds until there is a line."""
        query = {"node": node, "item": item, "from": start or None}
        query |= {"attempt": attempt, "wait": wait or None}
        return json_request(NodeLogs, "GET", f"/runs/{run_id}/logs", **query)

    # -- artifacts -------------------------------------------------------------------------

    @Operation
    def put_artifact(
        data: bytes | Path, *, name: str = "", media_type: str | None = None
    ) -> Request[ArtifactRef]:
        """Store ``data`` (bytes, or a file's) as an artifact; its reference names it."""
        if isinstance(data, Path):
            name = name or data.name
            data = data.read_bytes()
        query = {"name": name or None, "media_type": media_type}
        stored = json_request(ArtifactRef, "PUT", "/artifacts", **query)
        return dataclasses.replace(stored, data=data, content_type="application/octet-stream")

    @Operation
    def artifact(digest: str) -> Request[bytes]:
        """An artifact's bytes, checked against ``digest`` (``sha256:<hex>``)."""
        return Request("GET", f"/artifacts/{digest}", bytes_checked(digest), large=True)

    # -- workers ---------------------------------------------------------------------------

    @Operation
    def workers() -> Request[list[WorkerBody | RefusedWorkerBody]]:
        """Every attached worker, and those refused for their protocol."""
        return json_request(list[WorkerBody | RefusedWorkerBody], "GET", "/workers")

    @Operation
    def resources() -> Request[ResourcesBody]:
        """Places, what is free, the queue with each call's reason, the provisioners."""
        return json_request(ResourcesBody, "GET", "/workers/resources")

    @Operation
    def pause_profile(provisioner: str, profile: str) -> Request[ProfileBody]:
        """Ask nothing of ``provisioner/profile`` until it is resumed (superuser)."""
        return json_request(ProfileBody, "POST", f"/provisioners/{provisioner}/{profile}/pause")

    @Operation
    def resume_profile(provisioner: str, profile: str) -> Request[ProfileBody]:
        """Resume a profile paused by a person or by itself (superuser)."""
        path = f"/provisioners/{provisioner}/{profile}/resume"
        return json_request(ProfileBody, "POST", path)

    @Operation
    def mint_worker_token(name: str, labels: list[str]) -> Request[MintedToken]:
        body = {"name": name, "labels": labels}
        return json_request(MintedToken, "POST", "/workers/tokens", body)

    @Operation
    def worker_tokens() -> Request[list[WorkerTokenBody]]:
        return json_request(list[WorkerTokenBody], "GET", "/workers/tokens")

    @Operation
    def revoke_worker_token(jti: str) -> Request[WorkerTokenBody]:
        """Revoke a worker token: its workers are disconnected at once."""
        return json_request(WorkerTokenBody, "POST", f"/workers/tokens/{jti}/revoke")

    # -- personal API tokens ----------------------------------------------------------------

    @Operation
    def mint_personal_token(name: str, *, days: int = 90) -> Request[MintedPersonalToken]:
        """A token for your scripts (``$FLUKSIO_TOKEN``), valid ``days``; its text is in
        this answer only."""
        body = {"name": name, "days": days}
        return json_request(MintedPersonalToken, "POST", "/tokens", body)

    @Operation
    def personal_tokens() -> Request[list[PersonalTokenBody]]:
        return json_request(list[PersonalTokenBody], "GET", "/tokens")

    @Operation
    def revoke_personal_token(token_id: str) -> Request[PersonalTokenBody]:
        """Revoke one of your tokens: refused from its next request on."""
        return json_request(PersonalTokenBody, "POST", f"/tokens/{token_id}/revoke")

    # -- secrets ---------------------------------------------------------------------------

    @Operation
    def put_secret(name: str, value: str, labels: list[str]) -> Request[SecretBody]:
        """Create or replace secret ``name`` (a superuser's): a node's
        ``{"$secret": name}`` is given its value only on the engine or on a worker whose
        signed labels include one of ``labels``. Its value never comes back."""
        body = {"value": value, "labels": labels}
        return json_request(SecretBody, "PUT", f"/secrets/{name}", body)

    @Operation
    def secrets() -> Request[list[SecretBody]]:
        """Every secret's name and labels (never a value)."""
        return json_request(list[SecretBody], "GET", "/secrets")

    @Operation
    def delete_secret(name: str) -> Request[Deleted]:
        return json_request(Deleted, "DELETE", f"/secrets/{name}")

    # -- metrics ---------------------------------------------------------------------------

    @Operation
    def mint_scrape_token(name: str) -> Request[MintedScrapeToken]:
        """A token that reads ``/metrics`` and nothing else (for Prometheus)."""
        return json_request(MintedScrapeToken, "POST", "/metrics/tokens", {"name": name})

    @Operation
    def scrape_tokens() -> Request[list[ScrapeTokenBody]]:
        return json_request(list[ScrapeTokenBody], "GET", "/metrics/tokens")

    @Operation
    def revoke_scrape_token(token_id: str) -> Request[ScrapeTokenBody]:
        return json_request(ScrapeTokenBody, "POST", f"/metrics/tokens/{token_id}/revoke")


def api_url(url: str) -> str:
    """``url`` (``http://host:8080``, with or without ``/api/v1``) as the API's base."""
    base = url.rstrip("/")
    return base if base.endswith("/api/v1") else base + "/api/v1"


Credentials = tuple[str, None] | tuple[str, str]
"""A token and None, or a username and a password."""


def credentials() -> Credentials:
    """``$FLUKSIO_TOKEN``, or ``$FLUKSIO_USERNAME`` with ``$FLUKSIO_PASSWORD``: from the
    environment, never from argv."""
    token = os.environ.get("FLUKSIO_TOKEN")
    if token:
        return token, None
    username = os.environ.get("FLUKSIO_USERNAME")
    password = os.environ.get("FLUKSIO_PASSWORD")
    if not (username and password):
        raise ClientError(
            "set FLUKSIO_TOKEN, or FLUKSIO_USERNAME and FLUKSIO_PASSWORD, to talk to the engine"
        )
    return username, password


def login_form(username: str, password: str) -> Request[str]:
    """The login form; its answer is the access token."""
    data = urllib.parse.urlencode({"username": username, "password": password}).encode()
    answer = json_request(AccessToken, "POST", "/login/access-token").decode

    def access_token(raw: bytes) -> str:
        return str(answer(raw).access_token)

    return Request(
        "POST", "/login/access-token", access_token, data, "application/x-www-form-urlencoded"
    )


def run_end(run_id: str, timeout: float | None) -> Steps[RunBody]:
    """The run once it has ended, or as it stands after ``timeout`` seconds (None: however
    long it takes): the engine holds each answer until the end or a minute."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = LONGEST_WAIT_S if deadline is None else deadline - time.monotonic()
        wait = max(0, min(LONGEST_WAIT_S, int(left)))
        run: RunBody = yield json_request(RunBody, "GET", f"/runs/{run_id}", wait=wait or None)
        if run.state in TERMINAL_RUN_STATES or wait == 0:
            return run
