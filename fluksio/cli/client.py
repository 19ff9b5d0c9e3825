"""A small synchronous client for the engine's API, used by the CLI.

Where to connect: ``--url``, else ``$FLUKSIO_URL``, else the engine recorded in the data
directory, else ``http://127.0.0.1:8080/api/v1``. Credentials come from the environment
only, so they never appear in a process listing: ``$FLUKSIO_TOKEN`` (a bearer token), or
``$FLUKSIO_USERNAME`` with ``$FLUKSIO_PASSWORD``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from fluksio.cli.sse import EventParser, ReceivedEvent
from fluksio.engine.datadir import DataDir
from fluksio.errors import FluksioError

__all__ = ["ApiClient", "ApiError", "EngineRefused", "resolve_api_url"]

DEFAULT_API_URL = "http://127.0.0.1:8080/api/v1"
_TIMEOUT_S = 90  # above the longest server-side wait a request may ask for
_FEED_SILENCE_S = 45  # three of the feed's keepalive comments
Answer = TypeVar("Answer", bound=BaseModel)


class ApiError(FluksioError):
    """The engine could not be reached (exit code 2)."""


class EngineRefused(ApiError):
    """The engine answered with a refusal: its ``detail`` says why (exit code 3)."""


def resolve_api_url(explicit: str | None, data_dir: Path | None) -> str:
    if explicit:
        return explicit.rstrip("/")
    if data_dir is not None:
        info = DataDir(data_dir).read_engine_info()
        if info and isinstance(info.get("url"), str):
            return f"{info['url']}/api/v1"
    return DEFAULT_API_URL


@dataclass
class ApiClient:
    base_url: str
    token: str | None = None

    def login_from_environment(self) -> None:
        """Take ``$FLUKSIO_TOKEN``, or log in with ``$FLUKSIO_USERNAME``/``$FLUKSIO_PASSWORD``."""
        token = os.environ.get("FLUKSIO_TOKEN")
        if token:
            self.token = token
            return
        username = os.environ.get("FLUKSIO_USERNAME")
        password = os.environ.get("FLUKSIO_PASSWORD")
        if not (username and password):
            raise ApiError(
                "set FLUKSIO_TOKEN, or FLUKSIO_USERNAME and FLUKSIO_PASSWORD, to talk to the engine"
            )
        form = urllib.parse.urlencode({"username": username, "password": password}).encode()
        answer = self._send(
            "POST", "/login/access-token", form, "application/x-www-form-urlencoded"
        )
        self.token = str(answer["access_token"])

    def read(
        self, model: type[Answer], method: str, path: str, body: object | None = None
    ) -> Answer:
        """The engine's answer to ``method path``, read with the model the engine made it
        from (``fluksio.api.answers``)."""
        return _shaped(TypeAdapter(model), self._json(method, path, body), method, path)

    def read_list(self, model: type[Answer], path: str) -> list[Answer]:
        """The engine's answer to ``GET path``, a list of ``model``."""
        return _shaped(TypeAdapter(list[model]), self._send("GET", path), "GET", path)  # type: ignore[valid-type]

    def _json(self, method: str, path: str, body: object | None) -> Any:
        if method == "GET":
            return self._send("GET", path)
        data = None if body is None else json.dumps(body).encode()
        return self._send(method, path, data, None if data is None else "application/json")

    def events(self, query: str = "", last_id: str | None = None) -> Iterator[ReceivedEvent]:
        """The live feed, as it comes, until the engine ends it (see ``GET /events``).

        The engine sends a comment every 15 s, so a read that waits much longer than
        that means the connection is gone: :class:`ApiError`, as for any drop.
        """
        request = urllib.request.Request(f"{self.base_url}/events{query}")  # noqa: S310
        request.add_header("Accept", "text/event-stream")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if last_id:
            request.add_header("Last-Event-ID", last_id)
        try:
            with urllib.request.urlopen(request, timeout=_FEED_SILENCE_S) as response:  # noqa: S310
                parser = EventParser()
                for line in response:
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except urllib.error.HTTPError as exc:
            raise EngineRefused(f"the engine refused: {_detail(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(f"the live feed from {self.base_url} broke off: {reason}") from None

    def _send(
        self, method: str, path: str, data: bytes | None = None, content_type: str | None = None
    ) -> Any:
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method)  # noqa: S310
        if content_type:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:  # noqa: S310
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise EngineRefused(f"the engine refused: {_detail(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(f"cannot reach the engine at {self.base_url}: {reason}") from None


Shaped = TypeVar("Shaped")


def _shaped(adapter: TypeAdapter[Shaped], answer: Any, method: str, path: str) -> Shaped:
    try:
        return adapter.validate_python(answer)
    except ValidationError as exc:
        raise ApiError(
            f"the engine answered {method} {path} in a shape this fluksio does not know"
            f" ({exc.error_count()} problem(s)): are the engine and this command the same"
            " version?"
        ) from None


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(error.read()).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else f"HTTP {error.code}"
