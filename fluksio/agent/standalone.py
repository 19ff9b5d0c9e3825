"""``agent.py``: the whole agent in one file, for a host where pip is not an option.

Copied beside ``runner.py`` (``GET /api/v1/workers/runtime``) it runs as
``python agent.py --url ...`` under any Python with aiohttp and click. It is generated
from this package's own modules, in dependency order, with the imports between them
removed, so it is never a second copy to keep in step by hand. The engine serves it at
``GET /api/v1/workers/agent.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fluksio.agent import __version__
from fluksio.agent.onefile import joined

__all__ = ["MODULES", "build_standalone_agent"]

MODULES = (
    "errors",
    "clock",
    "realtime",
    "protocol/codec",
    "protocol/frames",
    "inventory",
    "urls",
    "connect_to",
    "walltime",
    "protocol/outcome",
    "live_output",
    "calls",
    "images",
    "containers/base",
    "containers/podman",
    "containers/apptainer",
    "containers/__init__",
    "containers/calls",
    "fork_client",
    "starters",
    "stopping",
    "launcher",
    "shared_store",
    "machine/unconfirmed",
    "machine/held",
    "machine/agent_machine",
    "reporting",
    "taken",
    "prefetch",
    "cache_report",
    "numbers",
    "declared",
    "settings",
    "secrecy",
    "attaching",
    "carrying",
    "session",
    "cli",
)
"""The agent's modules, each after those it imports."""

_HERE = Path(__file__).resolve().parent


@functools.cache
def build_standalone_agent() -> str:
    parts = [
        "#!/usr/bin/env python3",
        f'"""fluksio-worker {__version__}, standalone: run beside runner.py as'
        " `python agent.py --url ...`.",
        "",
        "Generated from the fluksio.agent package; needs aiohttp and click.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import os as _os",
        "import sys as _sys",
        "",
        "# runner.py lies beside this file.",
        "_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))",
        "import runner  # noqa: E402",
        "",
        "",
        "def runner_path() -> str:",
        '    """runner.py, beside this file (what the package builds and caches)."""',
        "    return _os.path.abspath(runner.__file__)",
        "",
        f'__version__ = "{__version__}"',
    ]
    parts.append(joined(_HERE, MODULES, unique=False))
    parts += ["", "", 'if __name__ == "__main__":', "    main()", ""]
    return "\n".join(parts)
