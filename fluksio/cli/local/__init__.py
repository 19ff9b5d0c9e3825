"""The commands that act on an engine's data directory themselves, not over HTTP.

``serve`` starts the engine; ``users add`` and ``keys rotate`` work while it is stopped;
``provisioners check`` reads ``provisioners.json`` and tries the SSH login; ``options``
makes their options from the engine's setting declarations. Every other command is a
client of a running engine (``fluksio.cli.client``), and ``tests/test_architecture.py``
holds everything outside this folder to that.
"""

from __future__ import annotations
