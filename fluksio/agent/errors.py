"""The one root of the errors the agent raises on purpose.

The agent imports nothing of the engine, so it cannot share ``fluksio.errors``; its own
errors (an unusable URL, an interpreter that cannot run calls, an engine that refuses
the worker) all derive from :class:`AgentError`, and the command line turns each into
one sentence.
"""

from __future__ import annotations

__all__ = ["AgentError"]


class AgentError(Exception):
    """Base of every deliberate error of the agent; the message is one sentence."""
