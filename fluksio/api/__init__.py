"""The engine's HTTP face: the app factory, REST under ``/api/v1``, the attach WebSocket,
the live feed, OpenAPI, authentication, the middlewares and the Workers screen.

It wires the engine (``fluksio.engine``) to aiohttp; the engine imports nothing of it.
"""

from __future__ import annotations
