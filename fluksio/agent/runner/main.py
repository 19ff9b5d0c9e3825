"""``runner.py call`` and ``runner.py serve``: how the launcher starts a call process or
the fork server."""

from __future__ import annotations

import os
import signal
import sys

from fluksio.agent.runner.environment import drop_credentials
from fluksio.agent.runner.forkserver import serve
from fluksio.agent.runner.node import run_child
from fluksio.agent.runner.processes import (
    become_subreaper,
    end_descendants,
    end_with_lifeline,
    kill_tree_and_exit,
)
from fluksio.agent.runner.protocol import RECORD_FD


def main(argv: list[str]) -> int:
    # runner.py's directory must not shadow the node's imports (it may hold agent.py).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if len(argv) >= 2 and argv[1] == "call":
        if len(argv) > 5:  # in a container: its output straight to the launcher's pipe
            output = int(argv[5])
            os.dup2(output, 1)
            os.dup2(output, 2)
            os.close(output)
        drop_credentials()
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        parent_pid = int(argv[2]) if len(argv) > 2 else 0
        # When the agent or engine dies, take the whole tree below this call along.
        become_subreaper()
        signal.signal(signal.SIGTERM, kill_tree_and_exit)
        if len(argv) > 4:  # in a container: its lifeline to the launcher
            end_with_lifeline(int(argv[4]))
        code = run_child(
            parent_pid,
            int(argv[3]) if len(argv) > 3 else RECORD_FD,
            death_signal=signal.SIGTERM,
        )
        end_descendants()
        os._exit(code)  # the result is written; do not wait for threads the node left
    if len(argv) >= 3 and argv[1] == "serve":
        serve(int(argv[2]), parent_pid=int(argv[3]) if len(argv) > 3 else 0)
        return 0
    sys.stderr.write(
        "usage: runner.py call [PARENT_PID [RECORD_FD [LIFELINE_FD [OUTPUT_FD]]]]"
        " | serve CONTROL_FD [PARENT_PID]\n"
    )
    return 2
