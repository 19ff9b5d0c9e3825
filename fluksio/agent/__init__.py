"""The Fluksio worker agent (the ``fluksio-worker`` distribution).

It dials out to an engine and runs the node calls sent to it. It imports nothing of the
engine: this package is all a worker host installs.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.2.0"
