"""How the engine makes each configured provisioner: with its clock and its state
directory, given to the constructor; a plugin written before, whose constructor takes its
settings alone, still loads."""

from __future__ import annotations

from pathlib import Path

import structlog.testing

from fluksio.clock import SystemClock
from fluksio.engine.datadir import DataDir
from fluksio.engine.provisioning import instantiate
from fluksio.provisioners.config import Loaded
from tests.support.clock import ManualClock
from tests.support.scripted import Scripted, Settings, scripted_settings


def test_the_engine_makes_each_provisioner_with_its_clock_and_state_and_old_plugins_load(
    tmp_path: Path,
) -> None:
    class OldStyle(Scripted):
        """A plugin written before the engine gave a clock: its constructor takes settings."""

        def __init__(self, settings: Settings) -> None:
            super().__init__(settings)

    layout = DataDir(tmp_path / "data").ensure()
    clock = ManualClock()
    loaded: list[Loaded] = [
        (Scripted, scripted_settings(name="new")),
        (OldStyle, scripted_settings(name="old")),
    ]
    with structlog.testing.capture_logs() as logged:
        new, old = instantiate(layout, loaded, clock)
    assert (new.clock, new.state_dir) == (clock, layout.provisioner_state("new"))
    # The old one still loads, with its state directory, on the system's clock, and says so.
    assert (isinstance(old.clock, SystemClock), old.state_dir) == (
        True,
        layout.provisioner_state("old"),
    )
    assert [e["type"] for e in logged if e["event"] == "plugin.old_constructor"] == ["scripted"]
