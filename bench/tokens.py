"""Worker-token verification cost, beside the floor of one bare Ed25519 signature check.

Every attach and every artifact request verifies a worker token (signature, claims, and a
revocation lookup in SQLite), so this sits on a hot path. Prints a table; run with
``.venv/bin/python bench/tokens.py``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.key_places import KeyFiles
from fluksio.engine.keys import KeyRing
from fluksio.engine.tokens import TokenService
from fluksio.engine.users import UserStore
from fluksio.engine.worker_tokens import WorkerTokenStore

ROUNDS = 5
PER_ROUND = 2000


def _per_call_us(action: Callable[[], object]) -> tuple[float, float]:
    samples = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(PER_ROUND):
            action()
        samples.append((time.perf_counter() - started) / PER_ROUND * 1e6)
    return statistics.median(samples), min(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        layout = DataDir(Path(tmp)).ensure()
        database = open_database(layout.database)
        keys = KeyRing(KeyFiles(layout))
        service = TokenService(keys, UserStore(database), WorkerTokenStore(database))
        minted = service.mint_worker("bench", ("gpu",), created_by=None)
        signing_input, _, _ = minted.token.rpartition(".")
        key = keys.current()
        signature = key.private.sign(signing_input.encode())

        rows = [
            (
                "floor: Ed25519 verify of the same bytes",
                _per_call_us(lambda: key.public.verify(signature, signing_input.encode())),
            ),
            (
                "verify_worker (signature, claims, revocation)",
                _per_call_us(lambda: service.verify_worker(minted.token)),
            ),
            (
                "mint_worker (sign + insert)",
                _per_call_us(lambda: service.mint_worker("b", ("gpu",), created_by=None)),
            ),
        ]
        floor = rows[0][1][0]
        print(f"{'operation':48} {'median us':>10} {'best us':>9} {'x floor':>8}")
        for name, (median, best) in rows:
            print(f"{name:48} {median:10.1f} {best:9.1f} {median / floor:8.1f}")
        database.close()


if __name__ == "__main__":
    main()
