"""Where the command line connects, and its client there (:class:`fluksio.client.Client`).

Where: ``--url`` (repeatable: the engines of one database, the next asked while one is a
standby or away), else ``$FLUKSIO_URL`` (one URL, or several separated by spaces or
commas), else the engine recorded in the data directory, else
``http://127.0.0.1:8080/api/v1``. Credentials come from the environment only, so
they never appear in a process listing: ``$FLUKSIO_TOKEN`` (a bearer token: a login's or a
personal one), or ``$FLUKSIO_USERNAME`` with ``$FLUKSIO_PASSWORD``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fluksio.client.client import Client
from fluksio.engine.datadir import DataDir

__all__ = ["DEFAULT_API_URL", "client_from_environment", "resolve_api_url"]

DEFAULT_API_URL = "http://127.0.0.1:8080/api/v1"


def resolve_api_url(explicit: str | None, data_dir: Path | None) -> str:
    if explicit:
        return explicit.rstrip("/")
    if data_dir is not None:
        info = DataDir(data_dir).read_engine_info()
        if info and isinstance(info.get("url"), str):
            return f"{info['url']}/api/v1"
    return DEFAULT_API_URL


def client_from_environment(urls: Sequence[str], data_dir: Path | None) -> Client:
    """The client of the engines the options and the environment name, logged in."""
    given = [url for text in urls for url in text.replace(",", " ").split()]
    return Client.from_environment([resolve_api_url(url, data_dir) for url in given or [""]])
