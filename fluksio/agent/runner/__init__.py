"""Runs one node call in a fresh process. Standard library only; CPython 3.9 or later.

This package is written as modules, each with one job (:data:`MODULES`), and run as one
file, ``runner.py``, made from them in that order with the imports between them taken
out (:func:`fluksio.agent.onefile.runner_source`). That one file is what runs wherever
node code runs: by the engine for its own calls, by ``fluksio-worker`` under its
``--python``, and copied beside ``agent.py`` on a host without pip (the engine serves it
at ``GET /api/v1/workers/runtime``). It imports nothing outside the standard library and
nothing of Fluksio. The agent and the engine import this package for what they share
with it (the environment filter, killing a call's tree, the protocol's numbers).

A call process has three descriptors, whichever way it was started:

* fd 0: the call's spec, one JSON document (read to EOF);
* fd 1 and 2: the node's output (stdout and stderr share one pipe, captured as its logs);
* fd 3: records, one JSON document per line: ``{"kind": "event", ...}`` for each
  ``emit`` and ``yield``, then exactly one ``{"kind": "result", "ok": ...}``.

The spec: ``{"op": "run" | "compile", "source", "node", "flow", "kwargs", "env"}``. ``env``
(thread caps, ``CUDA_VISIBLE_DEVICES``, where artifacts live) is applied before the node's
code is imported, which is the only moment numerical libraries read it.

Two ways to start a call process:

* ``python runner.py call``: a fresh interpreter per call (the fallback);
* ``python runner.py serve FD``: a **fork server**. It imports only this file and the
  standard library, and forks one child per call, ahead of need: the client sends each
  call to a child that is waiting for it (see :func:`serve`). Forking costs about a
  millisecond where starting an interpreter costs several, and forked ahead it costs the
  call nothing.

The fork server reads no thread-cap or device variable and starts no thread, so a child
that sets them before importing the node's code is indistinguishable from a fresh
interpreter. Every call process gets its own process group, dies with its parent
(``PR_SET_PDEATHSIG``) and is a subreaper, so what it starts stays below it. Nothing a
node started outlives its call: not a grandchild, not a process that left the group with
``setsid``, not a double fork. A call that returns kills what is left below it; a call
that is cancelled or stopped is killed with its whole tree, found through ``/proc``; the
fork server kills what a call process that died anyway left orphaned to it; and the fork
server, or a spawned call, is sent SIGTERM when its parent dies, however that dies, and
then SIGKILLs its whole tree.
"""

from __future__ import annotations

from fluksio.agent.runner.artifacts import (
    artifact_cache_dir,
    load_artifact,
    named_digests,
    prefetch_artifacts,
    save_artifact,
)
from fluksio.agent.runner.environment import filtered_environ
from fluksio.agent.runner.processes import kill_call, signal_tree, tree_memory
from fluksio.agent.runner.protocol import MAX_MESSAGE_BYTES, PROTOCOL

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MODULES",
    "PROTOCOL",
    "artifact_cache_dir",
    "filtered_environ",
    "kill_call",
    "load_artifact",
    "named_digests",
    "prefetch_artifacts",
    "save_artifact",
    "signal_tree",
    "tree_memory",
]

MODULES = (
    "protocol",
    "environment",
    "artifacts",
    "reporter",
    "processes",
    "node",
    "forkserver",
    "main",
)
"""The modules of ``runner.py``, each after those it imports."""
