"""What a call's arguments name as inputs, for the scheduler's cache rule."""

from __future__ import annotations

from fluksio.agent.runner.artifacts import named_digests
from fluksio.engine.runs.machine.inputs import VALUES_READ, input_artifacts

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_references_anywhere_count_once_each_with_their_sizes() -> None:
    arguments = {
        "weights": {"digest": A, "size": 5 << 30, "name": "w.bin"},
        "shards": [{"digest": B}, {"again": {"digest": A, "size": 1}}],
        "not_one": {"digest": "md5:abc", "size": 9},
        "text": A,
    }
    assert input_artifacts(arguments) == ((A, 5 << 30), (B, 0))


def test_a_large_argument_is_read_only_so_far() -> None:
    early = {"digest": A, "size": 7}
    late = {"digest": B, "size": 8}
    arguments = {"model": early, "samples": [*range(VALUES_READ), late]}
    assert input_artifacts(arguments) == ((A, 7),)


def test_a_calls_arguments_name_artifacts_anywhere_once_each() -> None:
    ref = {"digest": f"sha256:{'a' * 64}", "size": 3, "name": "w.bin"}
    kwargs = {
        "weights": ref,
        "batches": [{"digest": f"sha256:{'b' * 64}"}, {"nested": {"again": ref}}],
        "not_a_ref": {"digest": "md5:abc"},
        "text": f"sha256:{'a' * 64}",
    }
    assert named_digests(kwargs) == [A.removeprefix("sha256:"), B.removeprefix("sha256:")]
    assert named_digests({"n": 1, "s": "x"}) == []
