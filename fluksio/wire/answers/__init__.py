"""Every answer's shape, as pydantic models: what the routes serialise, what the OpenAPI
document describes, and what the command line reads back.

Plain data only: pydantic, the standard library and the rest of the wire's vocabulary
(states, wait kinds, stages), so a client imports them without the server (aiohttp, the
engine's stores). A shape is declared here once; a route's declaration names it.
"""
