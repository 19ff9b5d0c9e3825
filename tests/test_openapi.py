"""``GET /api/v1/openapi.json``: a valid OpenAPI 3.1 document that covers every route, whose
schemas are the ones the engine's real answers have."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, get_args

import pytest
from aiohttp import web
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate
from pydantic import BaseModel

from fluksio.api.app import create_app
from fluksio.api.declare import Call, Routes
from fluksio.api.openapi import openapi_document
from fluksio.engine.provisioning import Configured
from fluksio.engine.settings import EngineSettings
from fluksio.provisioners.machine.requests import RequestStage
from fluksio.provisioners.plugins import build_plugins
from fluksio.scheduler import WaitKind as SchedulerWaitKind
from fluksio.wire.answers.workers import Stage, WaitKind
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.openapi_check import check_answers
from tests.support.scripted import Scripted, scripted_settings

NODE = "def process():\n    return 1\n"


async def _document(api: InProcessEngine) -> dict[str, Any]:
    async with api.client.get("/api/v1/openapi.json") as answer:
        assert answer.status == 200, "the description needs no token"
        document: dict[str, Any] = await answer.json()
    return document


def _check(document: dict[str, Any], path: str, method: str, status: int, body: Any) -> None:
    """``body`` is what the document says ``method path`` answers with ``status``."""
    answer = document["paths"][path][method]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    validator = OAS31Validator({**schema, "components": document["components"]})
    errors = [error.message for error in validator.iter_errors(body)]
    assert not errors, f"{method.upper()} {path} {status}: {errors[:3]}"


async def test_the_description_is_valid_and_covers_every_route(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    document = await _document(api)
    validate(document)  # raises on anything OpenAPI 3.1 does not allow
    assert document["openapi"].startswith("3.1")

    served = {
        (route.resource.canonical, route.method.lower())
        for route in api.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    described = {
        (path, method) for path, operations in document["paths"].items() for method in operations
    }
    assert served == described
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation["summary"], (method, path)
            assert "security" in operation, (method, path)
            if operation["security"]:
                assert "401" in operation["responses"], f"{method} {path}: its refusal"
    runs = document["paths"]["/api/v1/flows/{name}/runs"]["post"]
    assert runs["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunRequest"
    }
    # A node's two bounds are told apart where a client reads the fields.
    node = document["components"]["schemas"]["NodeSpec"]["properties"]
    assert "without reporting anything" in node["timeout"]["description"]
    assert "bounds silence, not duration" in node["timeout"]["description"]
    assert "longest a call of this node may run" in node["limit"]["description"]
    assert node["limit"]["anyOf"][0]["exclusiveMinimum"] == 0


async def test_every_route_answers_for_real_in_the_shapes_it_describes(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """Each of the document's routes is called for real; every answer (this test's and
    every other in-process test's) is checked against the document as it passes."""
    provisioner = Scripted(scripted_settings())
    configured = Configured(build_plugins(), [provisioner])
    api = await start_in_process(aiohttp_client, tmp_path / "data", provisioners=configured)
    document = await _document(api)
    for health in ("/health", "/healthz/live", "/healthz/ready"):
        assert (await api.request("GET", health)).status == 200

    minted = await api.request(
        "POST", "/workers/tokens", json_body={"name": "box", "labels": ["box"]}
    )
    assert minted.status == 201, minted
    token = minted.body["token"]
    assert (await api.request("GET", "/workers/tokens/self", token=token)).status == 200
    spare = await api.request("POST", "/workers/tokens", json_body={"name": "spare", "labels": []})
    jti = spare.body["jti"]
    assert (await api.request("POST", f"/workers/tokens/{jti}/revoke")).status == 200
    worker = await api.attach(token, name="box", labels=["box"], cpus=2)
    for path in ("/workers", "/workers/resources", "/workers/tokens", "/workers/runtime"):
        assert (await api.request("GET", path)).status == 200, path
    assert (await api.request("GET", "/workers/agent.py")).status == 200
    for step in ("pause", "resume"):
        assert (await api.request("POST", f"/provisioners/box/small/{step}")).status == 200
    assert (await api.request("POST", "/provisioners/box/nope/pause")).status == 404

    assert (
        await api.put_flow("remote", [{"id": "n", "code": NODE, "worker": "box"}])
    ).status == 201
    assert (await api.request("GET", "/flows")).status == 200
    assert (await api.request("GET", "/flows/remote")).status == 200
    run = await api.start_run("remote")
    await worker.answer((await worker.next_call())["call_id"], {"x": 1})
    assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    assert (await api.request("GET", "/runs")).status == 200
    assert (await api.request("GET", f"/runs/{run['id']}/logs?node=n&from=0")).status == 200
    array = {"id": "n", "code": NODE, "worker": "box", "items": [{"y": 1}, {"y": 2}]}
    assert (await api.put_flow("sweep", [array])).status == 201
    swept = await api.start_run("sweep")
    await worker.answer((await worker.next_call())["call_id"], {"x": 1})
    await worker.answer((await worker.next_call())["call_id"], ok=False)
    assert (await api.wait_run(swept["id"]))["state"] == "failed"
    assert (await api.request("GET", f"/runs/{swept['id']}/items?limit=1")).status == 200
    assert (await api.request("POST", f"/runs/{swept['id']}/retry")).status == 200
    chosen = {"items": [1]}
    cancel = await api.request("POST", f"/runs/{swept['id']}/items/cancel", json_body=chosen)
    assert cancel.status == 200, cancel.body
    # It answered before the cancel reached it: its answer counts.
    await worker.answer((await worker.next_call())["call_id"], {"x": 1})
    assert (await api.wait_run(swept["id"]))["state"] == "succeeded"
    assert (await api.request("DELETE", f"/runs/{run['id']}")).status == 200
    assert (
        await api.put_flow("parked", [{"id": "n", "code": NODE, "worker": "gpu"}])
    ).status == 201
    waiting = await api.start_run("parked")
    assert (await api.request("POST", f"/runs/{waiting['id']}/cancel")).status == 200
    assert (await api.request("DELETE", "/flows/parked")).status == 200

    secret = {"value": "s3cret", "labels": []}
    assert (await api.request("PUT", "/secrets/key", json_body=secret)).status == 200
    assert (await api.request("GET", "/secrets")).status == 200
    assert (await api.request("DELETE", "/secrets/key")).status == 200

    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.put("/api/v1/artifacts?name=a.txt", data=b"abc", headers=headers) as put:
        assert put.status == 201
        digest = (await put.json())["digest"]
    async with api.client.get(f"/api/v1/artifacts/{digest}", headers=headers) as got:
        assert await got.read() == b"abc"
    async with api.client.get("/api/v1/events", headers=headers) as feed:
        async with asyncio.timeout(10):
            assert b"event: ready" in await feed.content.readuntil(b"event: ready")

    scrape = await api.request("POST", "/metrics/tokens", json_body={"name": "prometheus"})
    assert scrape.status == 201, scrape
    assert (await api.request("GET", "/metrics/tokens")).status == 200
    async with api.client.get(
        "/metrics", headers={"Authorization": f"Bearer {scrape.body['token']}"}
    ) as m:
        assert m.status == 200
    assert (await api.request("POST", f"/metrics/tokens/{scrape.body['id']}/revoke")).status == 200

    personal = await api.request("POST", "/tokens", json_body={"name": "script"})
    assert personal.status == 201, personal
    assert (await api.request("GET", "/tokens")).status == 200
    assert (await api.request("POST", f"/tokens/{personal.body['id']}/revoke")).status == 200

    for page in ("/", "/workers", "/static/workers.js"):
        async with api.client.get(page, allow_redirects=False) as answer:
            assert answer.status in (200, 302), page

    # Refusals are checked too: a missing run, a malformed flow, a bad token.
    assert (await api.request("GET", "/runs/nope")).status == 404
    assert (await api.request("PUT", "/flows/x", json_body={"nodes": []})).status == 422
    assert (await api.request("GET", "/flows", token="nope")).status == 401
    await worker.close()

    answered = {(method, path) for method, path, status in api.answers.seen if status < 400}
    documented = {
        (method, path) for path, operations in document["paths"].items() for method in operations
    }
    assert documented - answered == set(), "routes this test never had answer"
    assert api.answers.streamed_problems == []
    refused = {status for _method, _path, status in api.answers.seen if status >= 400}
    assert {401, 404, 422} <= refused


async def test_an_answer_of_another_model_than_declared_is_a_server_error(
    aiohttp_client: ClientFactory,
) -> None:
    """The declaration is kept, not trusted: a handler cannot answer in an undeclared shape."""

    class Declared(BaseModel):
        name: str

    class Other(BaseModel):
        name: str

    routes = Routes(prefix="")

    @routes.get("/right", auth="none", answer=Declared)
    async def _right(_call: Call[None]) -> Declared:
        """Right"""
        return Declared(name="right")

    @routes.get("/wrong", auth="none", answer=Declared)
    async def _wrong(_call: Call[None]) -> Other:
        """Wrong"""
        return Other(name="wrong")

    @routes.get("/many", auth="none", answer=Declared, many=True)
    async def _one(_call: Call[None]) -> Declared:
        """Many"""
        return Declared(name="one, not a list")

    @routes.get("/teapot", auth="none")
    async def _teapot(_call: Call[None]) -> web.Response:
        """Raw JSON"""
        return web.json_response({"short": "and stout"}, status=418)

    app = web.Application()
    app.router.add_routes(routes.route_defs())
    check = check_answers(app)
    client = await aiohttp_client(app)
    async with client.get("/teapot") as answer:
        assert answer.status == 500, "the test tier's check flags an undocumented status"
        assert "answered 418, which it does not document" in (await answer.json())["detail"]
    async with client.get("/right") as answer:
        assert answer.status == 200 and await answer.json() == {"name": "right"}
    for path in ("/wrong", "/many"):
        async with client.get(path) as answer:
            assert answer.status == 500, path
    assert ("get", "/right", 200) in check.seen
    with pytest.raises(TypeError, match="many=True needs an answer model"):
        routes.get("/bad", auth="none", many=True)(_teapot)
    with pytest.raises(TypeError, match="GET /undocumented: its handler's docstring"):
        routes.get("/undocumented", auth="none")(_undocumented)


async def _undocumented(_call: Call[None]) -> web.Response:
    return web.Response()


def test_a_route_without_a_description_is_an_error_naming_it(tmp_path: Path) -> None:
    app = create_app(EngineSettings(data_dir=tmp_path / "data"))

    async def undocumented(_request: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/api/v1/secret-door", undocumented)
    with pytest.raises(LookupError, match="GET /api/v1/secret-door"):
        openapi_document(app)


RECORDED = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"
"""The API as published: a change to it is a change to this file, made on purpose."""


def test_the_document_is_the_one_recorded_in_docs(tmp_path: Path) -> None:
    app = create_app(EngineSettings(data_dir=tmp_path / "data"))
    made = json.dumps(openapi_document(app), indent=1) + "\n"
    if os.environ.get("FLUKSIO_RECORD_OPENAPI") == "1":
        RECORDED.write_text(made)
    assert made == RECORDED.read_text(), (
        "the API changed: if on purpose, record it with FLUKSIO_RECORD_OPENAPI=1"
    )


def test_the_wait_kinds_in_the_answers_are_the_schedulers() -> None:
    """The wire names them itself (a client imports no scheduler): word for word the same."""
    assert [kind.value for kind in WaitKind] == [kind.value for kind in SchedulerWaitKind]


def test_a_machine_requests_stages_in_the_answers_are_the_engines() -> None:
    """The answers name the stages themselves (a client imports no provisioner): the two
    lists stay word for word the same."""
    assert set(get_args(Stage)) == {stage.value for stage in RequestStage}
