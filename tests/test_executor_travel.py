"""What travels with a function sent by the executor (issue 65, items 9 and 10): a module
helper named ``process`` (the node's entry point's name) runs, code over a node's bound is
``CannotSend`` at submit, and the ``ArtifactRef`` that ``put_artifact`` returns is an
argument the node reads. A real engine and its own worker (``local()``)."""

from __future__ import annotations

import pytest

from fluksio.client import CannotSend, Client
from fluksio.client.executor import RemoteExecutor

pytestmark = pytest.mark.process


def process(x: int) -> int:  # a helper of the common name the node's entry point has
    return x * 3


def uses_process(x: int) -> int:
    return process(x) + 1


def artifact_length(ref: dict[str, object]) -> int:
    import fluksio  # noqa: PLC0415 -- the node's module, where it runs

    with open(fluksio.load_artifact(ref), "rb") as data:  # type: ignore[attr-defined]
        return len(data.read())


# Each under the bound a constant travels within, together over a node's code.
H0 = H1 = H2 = H3 = H4 = H5 = H6 = H7 = H8 = H9 = H10 = H11 = H12 = H13 = H14 = H15 = H16 = (
    "x" * 62_000
)


def reads_much(x: int) -> int:
    return x + len(
        H0 + H1 + H2 + H3 + H4 + H5 + H6 + H7 + H8 + H9 + H10 + H11 + H12 + H13 + H14 + H15 + H16
    )


def test_a_helper_named_process_travels_and_what_cannot_is_said_at_submit(
    gpu: RemoteExecutor, client: Client
) -> None:
    # Before, the helper and the entry point clashed: process() missing ... 'kwargs'.
    assert gpu.submit(uses_process, 2).result(timeout=60) == 7
    assert gpu.submit(process, 2).result(timeout=60) == 6
    assert list(gpu.map(uses_process, [1, 2])) == [4, 7]
    with pytest.raises(CannotSend, match=r"characters of code, and a node's code is at most"):
        gpu.submit(reads_much, 1)


def test_put_artifacts_answer_is_an_argument_the_node_reads(
    gpu: RemoteExecutor, client: Client
) -> None:
    ref = client.put_artifact(b"weights" * 1000, name="w.bin")
    # Before, "not JSON" though the refusal and docs/python.md sent users to put_artifact.
    assert gpu.submit(artifact_length, ref).result(timeout=60) == 7000
    assert list(gpu.map(artifact_length, [ref, ref])) == [7000, 7000]
