"""A node that starts three processes meant to escape its call, for the process-tree tests.

A ``setsid sleep``, a ``nohup sleep &`` (its shell exits: the sleep is orphaned) and a
daemon's double fork (the grandchild is nobody's child and has its own session). Each
pid is written to ``marks/<name>`` once it runs. Then, by ``then``: ``return`` returns at
once, ``quiet`` sleeps silently, and anything else reports every 0.1 s forever (so only a
cancel or a limit ends it).
"""

from __future__ import annotations

import textwrap

__all__ = ["ESCAPEES", "ESCAPING"]

ESCAPEES = ("setsid", "nohup", "double")

ESCAPING = textwrap.dedent("""
    import os, subprocess, time

    def process(marks, then):
        def mark(name, pid):
            with open(f"{marks}/{name}.tmp", "w") as handle:
                handle.write(str(pid))
            os.rename(f"{marks}/{name}.tmp", f"{marks}/{name}")

        mark("setsid", subprocess.Popen(["setsid", "sleep", "300"]).pid)
        subprocess.run(["sh", "-c", f"nohup sleep 300 >/dev/null 2>&1 & echo $! > {marks}/nohup"])
        first = os.fork()
        if first == 0:
            if os.fork() == 0:
                os.setsid()
                mark("double", os.getpid())
                time.sleep(300)
            os._exit(0)
        os.waitpid(first, 0)
        while not os.path.exists(f"{marks}/double"):
            time.sleep(0.01)
        if then == "return":
            return "left three processes running"
        if then == "quiet":
            time.sleep(300)
        while True:
            time.sleep(0.1)
            print("still busy", flush=True)
""").lstrip()
