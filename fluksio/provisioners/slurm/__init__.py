"""The built-in Slurm provisioner: a job whose payload is a worker dialling back.

The job script is a pure render (:func:`render_script`, in ``script.py``), tested as
text. Everything that comes from configuration and is data (URL, labels, names) is
shell-quoted; ``prerun`` lines are commands by design (``module load``, ``source
venv/bin/activate``); no field may contain a control character, so nothing can add a line
to the script. The worker's token never appears in the script, argv or the job's recorded
environment: it is written to a 0600 file in the same SSH command that runs ``sbatch``
(token on stdin; the batch base does it), and the script reads it from there and deletes
it. A ``ca_file`` travels the same way (the script only names where it was put).

Every job is marked with its request id (``--comment=fluksio-request=<id>``, shown by
``squeue -o %k``): a submission whose answer was lost (a hung ``sbatch``, an engine
killed mid-submission) is found by its mark, never submitted again. The token file's name
is the request id too, so a restarted engine, which keeps request ids on disk, removes
what a cancelled job left behind.

``settings.py`` (``provisioners.json``), ``options.py`` (what ``sbatch`` options say),
``states.py`` (Slurm's states onto ours), ``script.py`` (the job script and what Slurm
prints), and ``provisioner.py`` (what it declares to the batch base).
"""

from __future__ import annotations

from typing import Any

from fluksio.provisioners.batch import QueuedJob
from fluksio.provisioners.hookspecs import hookimpl
from fluksio.provisioners.provisioner import Provisioner
from fluksio.provisioners.slurm.options import (
    missing_partitions,
    parse_slurm_time,
    past_time_limits,
    sbatch_partitions,
    sbatch_time_limit,
)
from fluksio.provisioners.slurm.provisioner import SlurmProvisioner
from fluksio.provisioners.slurm.script import (
    ca_file,
    job_mark,
    parse_sbatch_parsable,
    parse_squeue,
    render_script,
    token_file,
)
from fluksio.provisioners.slurm.settings import SlurmProfile, SlurmSettings
from fluksio.provisioners.slurm.states import SLURM_STATES, slurm_state

__all__ = [
    "SLURM_STATES",
    "QueuedJob",
    "SlurmProfile",
    "SlurmProvisioner",
    "SlurmSettings",
    "ca_file",
    "fluksio_provisioner_types",
    "job_mark",
    "missing_partitions",
    "parse_sbatch_parsable",
    "parse_slurm_time",
    "parse_squeue",
    "past_time_limits",
    "render_script",
    "sbatch_partitions",
    "sbatch_time_limit",
    "slurm_state",
    "token_file",
]


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [SlurmProvisioner]
