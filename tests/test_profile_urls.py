"""A profile's workers and the engines of one database: each job's worker is given every
engine's attach URL (``engine_url``, then ``other_engine_urls``), each one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio.errors import ConfigError
from fluksio.provisioners.base import worker_argv
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.plugins import build_plugins

EXAMPLE = Path(__file__).resolve().parent.parent / "provisioners.example.json"


def test_a_profiles_workers_are_given_every_engines_url(tmp_path: Path) -> None:
    """The engines of one database: each job's worker dials the next when one fails."""
    entries = json.loads(EXAMPLE.read_text())
    slurm = entries[0]
    others = ["wss://b.example/api/v1/workers/attach", "wss://c.example/api/v1/workers/attach"]
    slurm["other_engine_urls"] = others
    types = build_plugins().provisioner_types()
    (_kind, settings), *_rest = load_provisioners(_write(tmp_path, entries), types)
    argv = worker_argv("fluksio-worker", settings, settings.profiles[0])
    urls = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--url"]
    assert urls == [slurm["engine_url"], *others]
    slurm["other_engine_urls"] = ["wss://b.example/api/v1/workers/attach\n--token x"]
    with pytest.raises(ConfigError, match="other_engine_urls"):
        load_provisioners(_write(tmp_path, entries), types)


def _write(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "provisioners.json"
    path.write_text(json.dumps(entries))
    return path
