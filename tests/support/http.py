"""A tiny synchronous HTTP client for tests (the engine under test runs in another process)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def detail(self) -> str:
        return str(self.body.get("detail")) if isinstance(self.body, dict) else ""


def call(
    method: str,
    url: str,
    *,
    token: str | None = None,
    json_body: object | None = None,
    form: dict[str, str] | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> Answer:
    data: bytes | None = None
    all_headers = dict(headers or {})
    if json_body is not None:
        data = json.dumps(json_body).encode()
        all_headers["Content-Type"] = "application/json"
    elif body is not None:
        data = body
        all_headers.setdefault("Content-Type", "application/octet-stream")
    elif form is not None:
        data = urllib.parse.urlencode(form).encode()
        all_headers["Content-Type"] = "application/x-www-form-urlencoded"
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status, answer_headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw, status, answer_headers = error.read(), error.code, dict(error.headers)
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode(errors="replace")
    return Answer(status=status, body=body, headers=answer_headers)
