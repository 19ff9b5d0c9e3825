"""The engine without HTTP: an ``Engine`` built from its settings, started, used, closed.

What an embedding program or a benchmark does: no aiohttp application, no socket; the
engine's own launcher still runs the node in a real process.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from fluksio.api.app import create_app
from fluksio.api.appkeys import ENGINE
from fluksio.engine.front.engine import Engine
from fluksio.engine.provisioning import Configured
from fluksio.engine.settings import EngineSettings
from fluksio.provisioners.plugins import build_plugins
from fluksio.wire.flows import FlowSpec
from fluksio.wire.states import RunState
from tests.support.runs import code

NODE = code("""
    def process(n):
        return {"twice": n * 2}
""")


def _engine(data_dir: Path) -> Engine:
    settings = EngineSettings(data_dir=data_dir, engine_slots=2)
    return Engine(settings, provisioners=Configured(build_plugins(), []))


async def test_an_engine_runs_a_flow_without_http_and_a_second_one_finds_the_run(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path / "data")
    await engine.start()
    try:
        flow = FlowSpec.model_validate({"nodes": [{"id": "double", "code": NODE}]})
        await engine.put_flow("double", flow, transient=False)
        started = await engine.start_run("double", {"n": 21})
        ended = await engine.run(started.id, wait_s=30)
        assert ended.state is RunState.SUCCEEDED, ended
        assert ended.nodes[0].result == {"twice": 42}
    finally:
        await engine.close()

    again = _engine(tmp_path / "data")
    await again.start()
    try:
        found = await again.run(started.id)
        assert found.state is RunState.SUCCEEDED
    finally:
        await again.close()


async def test_a_question_asked_before_start_names_what_is_not_open(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "data")
    # Its questions are its parts', made once its stores are open.
    with pytest.raises(AttributeError, match="flow_list"):
        engine.flow_list()
    assert not (tmp_path / "data").exists()  # nothing is opened before start


def test_the_http_app_holds_the_engine_under_one_key_and_nothing_of_it_elsewhere(
    tmp_path: Path,
) -> None:
    app = create_app(EngineSettings(data_dir=tmp_path / "data"))
    engine = app[ENGINE]
    parts = {id(value) for value in vars(engine).values()}
    assert [key for key in app if isinstance(app[key], Engine)] == [ENGINE]
    assert [key for key in app if id(app[key]) in parts] == []


async def test_a_started_engine_shows_its_stream_and_views_and_keeps_its_stores(
    tmp_path: Path,
) -> None:
    """What a route, a test or an embedding program may reach besides the engine's
    questions: nothing that writes (no store, no dispatcher, no clock to set timers on)."""
    engine = _engine(tmp_path / "data")
    await engine.start()
    try:
        shown = {name for name in vars(engine) if not name.startswith("_")}
        public = {"settings", "layout", "stream", "workers", "feed", "metrics", "views"}
        # Besides these, its questions: methods of the parts it answers them with.
        questions = {name for name in shown - public if inspect.ismethod(getattr(engine, name))}
        owners = {type(getattr(engine, name).__self__).__module__ for name in questions}
        assert shown - questions == public
        assert len(questions) > 30 and all(o.startswith("fluksio.engine.front.") for o in owners)
        kept = {"_database", "_runs", "_flows", "_tokens", "_dispatcher", "_clock"}
        assert kept <= set(vars(engine))
    finally:
        await engine.close()
