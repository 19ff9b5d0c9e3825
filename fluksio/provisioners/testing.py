"""What a plugin's own tests may use: a remote shell whose every command gets the next
scripted reply, so a provisioner's life cycle is tested in milliseconds (as dask-jobqueue
tests its job classes), before it is tested against the real system.

    shell = ScriptedShell((0, "41\n", ""), (0, QUEUE_TEXT, ""))
    provisioner = MyProvisioner(settings, shell)
    submission = await provisioner.submit(profile, request_id="r1", token="t")
    (argv, stdin), _poll = shell.sent  # what went to the login node, and on stdin

A reply is ``(status, stdout, stderr)``, or an exception to raise (a
:class:`~fluksio.provisioners.TransportError`: SSH could not run the command).
"""

from __future__ import annotations

from collections.abc import Sequence

from fluksio.ssh.shell import Completed, Route

__all__ = ["ScriptedShell"]


class ScriptedShell:
    """Answers each command with the next scripted reply; records what was sent."""

    def __init__(self, *replies: tuple[int, str, str] | Exception) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[tuple[str, ...], str | None]] = []
        self.once: list[bool] = []
        self.closed = False

    async def run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        self.sent.append((tuple(argv), stdin))
        self.once.append(once)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        status, stdout, stderr = reply
        return Completed(tuple(argv), status, stdout, stderr)

    async def close(self) -> None:
        self.closed = True

    async def describe(self) -> Route:
        return Route("asyncssh", None, (), "hpc@login:22", None)
