"""``GET /api/v1/openapi.json``: a valid OpenAPI 3.1 document that covers every route, whose
schemas are the ones the engine's real answers have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from fluksio.api.app import create_app
from fluksio.api.openapi import openapi_document
from fluksio.engine.settings import EngineSettings
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process

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


async def test_real_answers_have_the_shapes_it_describes(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    document = await _document(api)
    minted = await api.request(
        "POST", "/workers/tokens", json_body={"name": "box", "labels": ["cpu"]}
    )
    _check(document, "/api/v1/workers/tokens", "post", 201, minted.body)
    worker = await api.attach(minted.body["token"], name="box", labels=["cpu"], cpus=2)
    await api.put_flow("gpu", [{"id": "n", "code": NODE, "worker": "gpu"}])
    put = await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    _check(document, "/api/v1/flows/{name}", "put", 200, put.body)
    run = await api.start_run("cpu")
    _check(document, "/api/v1/flows/{name}/runs", "post", 201, run)
    call = await worker.next_call()
    await worker.answer(call["call_id"], {"x": 1})
    waiting = await api.start_run("gpu")
    _check(document, "/api/v1/runs/{run_id}", "get", 200, await api.wait_run(run["id"]))
    for path in ("/workers", "/workers/resources", "/workers/tokens", "/runs", "/flows"):
        answer = await api.request("GET", path)
        _check(document, f"/api/v1{path}", "get", 200, answer.body)
    missing = await api.request("GET", "/runs/nope")
    _check(document, "/api/v1/runs/{run_id}", "get", 404, missing.body)
    bad = await api.request("PUT", "/flows/x", json_body={"nodes": []})
    _check(document, "/api/v1/flows/{name}", "put", 422, bad.body)
    await api.request("POST", f"/runs/{waiting['id']}/cancel")
    await worker.close()


def test_a_route_without_a_description_is_an_error_naming_it(tmp_path: Path) -> None:
    app = create_app(EngineSettings(data_dir=tmp_path / "data"))

    async def undocumented(_request: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/api/v1/secret-door", undocumented)
    with pytest.raises(LookupError, match="GET /api/v1/secret-door"):
        openapi_document(app)
