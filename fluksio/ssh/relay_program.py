"""The relay on a login node: the one program of ours that runs there between jobs.

Sent as text over the engine's SSH connection and run by the login node's ``python3``
(3.6 or newer, standard library only: login nodes keep old Pythons; a test parses it as
3.6). It listens on every address of the login node, where compute nodes can reach it
(or on the one ``ADDRESS`` it is given, below), and passes each connection's bytes to a
port on the login node's loopback that the engine's SSH connection forwards to the engine
(``ssh -R 127.0.0.1:0:...``), so it works with ``GatewayPorts no``. It never reads what
it passes: TLS runs from the worker to the engine.

It lives only as long as the engine keeps it: standard input is the engine's, and the
engine writes a line every few seconds. End of input (the engine closed it, or its SSH
connection went) or ``silence_s`` without a line ends the relay and every connection it
holds at once.

A connection is carried to the engine only once it has sent something (a worker's TLS
hello or request comes at once): one silent for ``FIRST_BYTES_S`` is closed, so silent
connections cannot hold the relay's places; past that, the engine's own bound on a request
head applies.

Arguments: ``LABEL PORT UPSTREAM MAX_CONNECTIONS SILENCE_S [ADDRESS]``. It listens on
``ADDRESS`` (default every address; ``127.0.0.1`` where the workers run on the far end
itself, an SSH host with no route out). ``PORT`` is the port it
wants (0: any); one still held by a relay that is ending (a dropped connection's) is waited
for up to ``SILENCE_S`` plus five seconds, then any port is taken. It prints ``listening
PORT`` once listening, and ``holding N`` after each line the engine sends.
"""

import contextlib
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_CHUNK = 65536
FIRST_BYTES_S = 10


def _pump(source: socket.socket, sink: socket.socket, done: "Callable[[], None]") -> None:
    """Copy one direction until either side ends, then end both directions."""
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        done()


class Relay:
    def __init__(self, upstream: int, max_connections: int) -> None:
        self.upstream = upstream
        self.max_connections = max_connections
        self.lock = threading.Lock()
        self.held = 0

    def serve(self, listener: socket.socket) -> None:
        while True:
            client, _address = listener.accept()
            with self.lock:
                full = self.held >= self.max_connections
                if not full:
                    self.held += 1
            if full:
                client.close()  # refused at once: a worker retries, a flood holds nothing
                continue
            threading.Thread(target=self.carry, args=(client,), daemon=True).start()

    def carry(self, client: socket.socket) -> None:
        client.settimeout(FIRST_BYTES_S)
        first = b""
        with contextlib.suppress(OSError):  # silent too long: a timeout is an OSError
            first = client.recv(_CHUNK)
        engine = None
        if first:
            with contextlib.suppress(OSError):
                engine = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
        if engine is None:
            client.close()
            self.release()
            return
        client.settimeout(None)
        engine.settimeout(None)
        for end in (client, engine):
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ended = threading.Event()

        def done() -> None:
            if ended.is_set():
                return
            ended.set()
            for end in (client, engine):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            client.close()
            engine.close()
            self.release()

        threading.Thread(target=_pump, args=(engine, client, done), daemon=True).start()
        try:
            engine.sendall(first)
        except OSError:
            done()
            return
        _pump(client, engine, done)

    def release(self) -> None:
        with self.lock:
            self.held -= 1


def _listen(address: str, port: int, wait_s: float) -> socket.socket:
    deadline = time.monotonic() + wait_s
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((address, port))
        except OSError:
            listener.close()
            if port == 0:
                raise
            if time.monotonic() >= deadline:
                port = 0  # held by someone else for good: any port rather than none
            else:
                time.sleep(0.5)
            continue
        listener.listen(128)
        return listener


def _watch_input(silence_s: float, relay: Relay) -> None:
    """Ends the process at end of input, or when the engine has been silent too long."""
    heard = [time.monotonic()]

    def read() -> None:
        stream = sys.stdin.buffer
        while True:
            line = stream.readline()
            if not line:
                os._exit(0)
            heard[0] = time.monotonic()
            with relay.lock:
                held = relay.held
            sys.stdout.write(f"holding {held}\n")
            sys.stdout.flush()

    threading.Thread(target=read, daemon=True).start()
    while True:
        time.sleep(0.5)
        if time.monotonic() - heard[0] > silence_s:
            os._exit(0)


def main(argv: "list[str]") -> None:
    _label, port, upstream, max_connections, silence_s = argv[:5]
    address = argv[5] if len(argv) > 5 else "0.0.0.0"  # noqa: S104 (compute nodes reach it)
    relay = Relay(int(upstream), int(max_connections))
    listener = _listen(address, int(port), float(silence_s) + 5)
    sys.stdout.write(f"listening {listener.getsockname()[1]}\n")
    sys.stdout.flush()
    threading.Thread(target=relay.serve, args=(listener,), daemon=True).start()
    _watch_input(float(silence_s), relay)


if __name__ == "__main__":
    main(sys.argv[1:])
