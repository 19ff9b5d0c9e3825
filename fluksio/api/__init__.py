"""The engine: aiohttp application, state store, authentication, command line.

This is the only layer that wires the others (scheduler, provisioners, agent) together.
"""

from __future__ import annotations
