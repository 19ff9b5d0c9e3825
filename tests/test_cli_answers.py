"""The command line reads the engine's answers with the models the engine makes them from.

An answer the models do not describe (an engine of another version, a proxy's page) is
one sentence and exit code 2, not a traceback or a silently wrong table.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from fluksio.cli import cli


class _OtherEngine(BaseHTTPRequestHandler):
    """Answers every GET with a list whose items have none of a worker's fields."""

    def do_GET(self) -> None:
        body = json.dumps([{"hostname": "box", "cores": 8}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def other_engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtherEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def test_an_answer_in_an_unknown_shape_is_one_sentence_and_exit_2(other_engine: str) -> None:
    done = CliRunner().invoke(
        cli, ["workers", "--url", other_engine, "list"], env={"FLUKSIO_TOKEN": "t"}
    )
    assert done.exit_code == 2, done.output
    assert "in a shape this fluksio does not know" in done.output
    assert "same version" in done.output
    assert "Traceback" not in done.output
