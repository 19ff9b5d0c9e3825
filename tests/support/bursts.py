"""Bursts of calls on the local Slurm, and a watcher of what the engine and ``squeue`` show
meanwhile (``tests/test_slurm_bursts.py``, ``tests/test_slurm_site_limits.py``)."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.support.engine import EngineProcess
from tests.support.runs import code
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import profile_view, resources_of

__all__ = ["Watch", "burst", "shared_dir"]


class Watch(threading.Thread):
    """Polls ``squeue`` and ``/workers/resources`` while a test runs: the most of this
    test's engine's jobs seen at once, queued at once and pending on the engine's side,
    every job id, and every reason a waiting call gave."""

    def __init__(self, engine: EngineProcess, token: str, slurm: LocalSlurm, root: Path) -> None:
        super().__init__(daemon=True)
        self.engine, self.token, self.slurm, self.root = engine, token, slurm, root
        self.stop = threading.Event()
        self.most_jobs = self.most_queued = self.most_pending = 0
        self.job_ids: set[str] = set()
        self.reasons: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            ours = self.slurm.fluksio_job_states(self.root)  # this test's engine's only
            self.job_ids.update(ours)
            self.most_jobs = max(self.most_jobs, len(ours))
            queued = sum(state == "PENDING" for state in ours.values())
            self.most_queued = max(self.most_queued, queued)
            resources = resources_of(self.engine, self.token)
            self.reasons.update(call["reason"] for call in resources["queued"] if call["reason"])
            stages = profile_view(self.engine, self.token)["jobs_by_stage"]
            pending = sum(n for stage, n in stages.items() if stage != "attached")
            self.most_pending = max(self.most_pending, pending)
            self.stop.wait(0.1)


def burst(
    ran: Path,
    count: int = 48,
    *,
    seconds: float = 1,
    starts: Path | None = None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Nodes of ``seconds`` each, for label hpc; each appends its id to ``ran`` as it ends
    (and to ``starts``, if given, as it starts) and returns its Slurm job's id."""
    node = code(f"""
        import os, time

        def process(node_id):
            if {str(starts) if starts else ""!r}:
                with open({str(starts)!r}, "a") as out:
                    out.write(node_id + "\\n")
            time.sleep({seconds})
            with open({str(ran)!r}, "a") as out:
                out.write(node_id + "\\n")
            return os.environ.get("SLURM_JOB_ID")
    """)
    return [
        {"id": f"n{i}", "worker": "hpc", "code": node, "params": {"node_id": f"n{i}"}, **fields}
        for i in range(count)
    ]


def shared_dir() -> Path:
    """A directory the job user can write to (pytest's tmp_path is root's alone)."""
    shared = Path(tempfile.mkdtemp(prefix="fluksio-burst-"))
    shared.chmod(0o777)
    return shared
