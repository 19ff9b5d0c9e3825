"""The engine: the core (the dispatcher and its machines), worker sessions, and state.

Runs, places, provisioning, tokens, users, secrets, artifacts and the SQLite store; the
live feed's buffer and the metrics. Nothing here speaks HTTP or reads a command line:
``fluksio.api`` serves it, ``fluksio.cli`` starts and talks to it.
"""

from __future__ import annotations
