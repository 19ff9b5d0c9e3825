"""An image reference is read as the runtime reads it, and a pattern matches it segment by
segment (issue 65, item 4): ``..`` and empty segments are refused at ``PUT`` naming the
field, a ``*`` never crosses a ``/``, and an archive reached through a link out of the
allowed folder is refused by the worker itself (it is the last to decide)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluksio.agent.containers import Podman
from fluksio.scheduler import Container, Containers, may_run
from tests.support.inprocess import ClientFactory, start_in_process

NODE = "def process():\n    return 1\n"


@pytest.mark.parametrize(
    "image",
    [
        "localhost/fluksio-test/../x",
        "localhost/fluksio-test/trixie:1/../../bookworm:1",
        "oci-archive:/images/../elsewhere.tar",
        "localhost//x",
        "oci-archive:/images/./t.tar",
    ],
)
async def test_a_node_whose_image_names_another_place_is_refused_at_put(
    aiohttp_client: ClientFactory, tmp_path: Path, image: str
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "d")
    node = {"id": "n", "code": NODE, "worker": "gpu", "container": {"image": image}}
    refused = await api.put_flow("f", [node])
    assert refused.status == 422, refused.body
    assert "nodes.0.container.image" in refused.body["detail"]
    assert "segment between its '/'" in refused.body["detail"]


def test_a_star_never_crosses_a_slash_where_the_engine_places_and_where_the_worker_runs(
    tmp_path: Path,
) -> None:
    allowed = Containers(runtime="podman", images=("localhost/fluksio-test/*",))
    placed = {
        image: may_run(allowed, Container(image=image, runtime=None))
        for image in ("localhost/fluksio-test/trixie:1", "localhost/fluksio-test/a/b:1")
    }
    assert placed == {
        "localhost/fluksio-test/trixie:1": True,
        "localhost/fluksio-test/a/b:1": False,
    }
    worker = Podman(("localhost/fluksio-test/*",))
    assert worker.allows("localhost/fluksio-test/trixie:1")
    assert not worker.allows("localhost/fluksio-test/a/b:1")
    assert not worker.allows("localhost/fluksio-test/../x")


def test_an_archive_is_matched_where_its_path_leads(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "images", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "tool.tar").write_bytes(b"archive")
    (elsewhere / "secret.tar").write_bytes(b"archive")
    (folder / "link.tar").symlink_to(elsewhere / "secret.tar")
    worker = Podman((f"oci-archive:{folder}/*",))
    assert worker.allows(f"oci-archive:{folder}/tool.tar")
    assert not worker.allows(f"oci-archive:{folder}/../elsewhere/secret.tar")
    assert not worker.allows(f"oci-archive:{folder}/link.tar"), "a link out of the folder"
