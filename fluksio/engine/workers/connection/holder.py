"""Who holds a call on a worker, in words that outlive the engine.

A worker's display name cannot say it: every job of one Slurm profile attaches with the
same token name and ``--name``, and two workers of one name are ordinary. A call placed on
a worker is stored with its :class:`Holder`: the worker token's id (each provisioned job
has a token of its own), the name the worker gave, and (our agent) the id of its process,
drawn when it starts. A restarted engine hands a call back only to the worker that holds
it (:func:`relation`): one of another token, or another name, gets nothing, whatever its
hello names; one of the same token and name but another process was started again, and
the call died with its process.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum

from fluksio.agent.protocol.frames import HelloFrame

__all__ = ["Holder", "Relation", "Verdict", "relation", "sort_back"]


@dataclass(frozen=True)
class Holder:
    token: str
    """The worker token's id (``jti``)."""
    name: str
    """The name the worker's hello gave (not the display name, which the token adds to)."""
    instance: str | None
    """Our agent's process id of its own (``instance`` in its hello); None: the published
    agent, or ours before it said one."""

    @classmethod
    def of(cls, token_id: str, hello: HelloFrame) -> Holder:
        """The worker that said ``hello`` on the token of id ``token_id``."""
        return cls(token_id, hello.name, hello.instance)

    def text(self) -> str:
        """As the store keeps it."""
        return json.dumps([self.token, self.name, self.instance])

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        """From the store; None where a row has none (written before holders were)."""
        if not text:
            return None
        token, name, instance = json.loads(text)
        return cls(str(token), str(name), None if instance is None else str(instance))


class Relation(Enum):
    SAME = "the worker that holds the call"
    STARTED_AGAIN = "the same worker, started again: the call died with its process"
    OTHER = "another worker: the call is none of its business"


def relation(held_by: Holder, back: Holder) -> Relation:
    """What a worker attaching (``back``) is to the holder of an awaited call."""
    if (held_by.token, held_by.name) != (back.token, back.name):
        return Relation.OTHER
    if held_by.instance is not None and held_by.instance != back.instance:
        return Relation.STARTED_AGAIN
    # An agent that said no instance when the call was placed: it is the same worker as
    # far as anyone can tell, and whether it names the call says the rest.
    return Relation.SAME


class Verdict(Enum):
    """What becomes of a call awaited of a worker that attached."""

    ADOPT = "it names the call: carried on where it runs"
    NOT_TAKEN = "it names what it holds, not this call: its run frame never reached it"
    PUBLISHED = "the published agent, which cannot carry a call over a restart"
    STARTED_AGAIN = "its process is not the one the call ran in"


def sort_back(
    awaited: Mapping[str, tuple[str, Holder | None]],
    worker: str,
    back: Holder,
    resume: Collection[str] | None,
    *,
    published: bool,
) -> dict[str, Verdict]:
    """A worker attaches (display name ``worker``, held as ``back``), naming ``resume``
    (None: it names nothing): the verdict on each awaited call (``awaited``: its place's
    name and holder, by call id) that is its business. Calls another worker holds are not
    in the answer: they go on awaiting theirs, whatever this one names."""
    named = set(resume or ())
    verdicts: dict[str, Verdict] = {}
    for call_id, (place, held_by) in awaited.items():
        if held_by is None:  # stored before holders were: known by its name alone
            is_to = Relation.SAME if place == worker else Relation.OTHER
        else:
            is_to = relation(held_by, back)
        if is_to is Relation.OTHER:
            continue
        if is_to is Relation.STARTED_AGAIN:
            verdicts[call_id] = Verdict.STARTED_AGAIN
        elif call_id in named:
            verdicts[call_id] = Verdict.ADOPT
        elif resume is not None:
            verdicts[call_id] = Verdict.NOT_TAKEN
        elif published:
            verdicts[call_id] = Verdict.PUBLISHED
        else:
            verdicts[call_id] = Verdict.STARTED_AGAIN  # ours, naming nothing: started afresh
    return verdicts
