"""Artifacts: content-addressed bytes, stored on the engine and moved over HTTP."""
