"""What a worker says it has, read from the batch job, the control group and the host.

The environment, the device directory, ``/proc/self/cgroup`` and the cgroup tree are
parameters: each case describes a machine in a temporary directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from fluksio.agent.inventory import detect_inventory

GIB = 1024 * 1024 * 1024


class _Machine(TypedDict):
    meminfo: Path
    proc_cgroup: Path
    cgroup_root: Path
    dev_dir: Path


def _machine(tmp_path: Path, cgroup: str, files: dict[str, str]) -> _Machine:
    tmp_path.mkdir(parents=True, exist_ok=True)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65536000 kB\nMemFree: 1 kB\n")  # 64000 MB
    proc_cgroup = tmp_path / "cgroup"
    proc_cgroup.write_text(cgroup)
    root = tmp_path / "sys-fs-cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    dev = tmp_path / "dev"
    dev.mkdir()
    return {"meminfo": meminfo, "proc_cgroup": proc_cgroup, "cgroup_root": root, "dev_dir": dev}


def test_a_job_with_mem_per_cpu_advertises_that_times_its_cores(tmp_path: Path) -> None:
    paths = _machine(tmp_path, "0::/\n", {})
    environ = {"SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_CPU": "2000"}
    found = detect_inventory(environ=environ, **paths)
    assert (found.cpus, found.ram_mb) == (4, 8000)
    per_node = detect_inventory(environ={**environ, "SLURM_MEM_PER_NODE": "5000"}, **paths)
    assert per_node.ram_mb == 5000, "a per-node figure is what the job was given"


def test_a_grid_engine_job_advertises_its_slots_as_cores(tmp_path: Path) -> None:
    paths = _machine(tmp_path, "0::/\n", {})
    assert detect_inventory(environ={"NSLOTS": "3", "JOB_ID": "12"}, **paths).cpus == 3
    assert detect_inventory(environ={"NSLOTS": "3"}, cpus=8, **paths).cpus == 8, "--cpus wins"


def test_a_cgroup_v2_limit_on_an_ancestor_caps_the_memory(tmp_path: Path) -> None:
    paths = _machine(
        tmp_path,
        "0::/slurm/job_41/step_batch\n",
        {
            "slurm/job_41/memory.max": str(3 * GIB),
            "slurm/job_41/step_batch/memory.max": "max",
            "memory.max": "max",
        },
    )
    assert detect_inventory(environ={}, **paths).ram_mb == 3072


def test_a_cgroup_v1_memory_limit_caps_it_and_an_unlimited_one_does_not(tmp_path: Path) -> None:
    limited = _machine(
        tmp_path / "limited",
        "4:memory:/docker/abc\n3:cpuset:/\n",
        {"memory/docker/abc/memory.limit_in_bytes": str(2 * GIB)},
    )
    assert detect_inventory(environ={}, **limited).ram_mb == 2048
    unlimited = _machine(
        tmp_path / "unlimited",
        "4:memory:/\n",
        {"memory/memory.limit_in_bytes": "9223372036854771712"},
    )
    assert detect_inventory(environ={}, **unlimited).ram_mb == 64000, "the host's"


def test_a_limit_above_what_the_job_says_changes_nothing(tmp_path: Path) -> None:
    paths = _machine(tmp_path, "0::/job\n", {"job/memory.max": str(100 * GIB)})
    found = detect_inventory(environ={"SLURM_MEM_PER_NODE": "1000"}, **paths)
    assert found.ram_mb == 1000
    assert detect_inventory(environ={}, ram_mb=7, **paths).ram_mb == 7, "--ram-mb wins"
