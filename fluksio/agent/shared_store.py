"""Whether this host shares the engine's artifact store: then calls use it directly."""

from __future__ import annotations

import os
from pathlib import Path

from fluksio.agent.protocol.frames import StoreOffer

__all__ = ["shared_store_env"]


def shared_store_env(store: StoreOffer | None) -> dict[str, str]:
    """``FLUKSIO_ARTIFACT_DIR`` when this host provably shares the engine's store, else {}.

    Proof: the probe file the engine wrote for this session is readable here and holds
    the nonce the engine sent, and the store is writable. Anything less means HTTP.
    """
    if store is None:
        return {}
    path, probe, nonce = store.path, store.probe, store.nonce
    root = Path(path)
    candidate = (root / probe).resolve()
    if not nonce or root.resolve() not in candidate.parents:
        return {}
    try:
        seen = candidate.read_text()
    except OSError:
        return {}
    if seen != nonce or not os.access(root / "sha256", os.W_OK):
        return {}
    return {"FLUKSIO_ARTIFACT_DIR": str(root)}
