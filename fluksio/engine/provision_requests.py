"""Provisioning requests, and profiles paused by hand, on disk: what the driver must find
again after a restart.

A request is written before it is submitted (its job id still unknown) and again as it
learns its job id and stage; the request id also names what the submission left on the
login node (the Slurm token file), so a restarted engine can clean that up.
"""

from __future__ import annotations

import dataclasses
import json

from fluksio.engine.database import Database
from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage

__all__ = ["ProvisionRequestStore"]


class ProvisionRequestStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    def save(self, request: MachineRequest) -> None:
        self._db.execute(
            "INSERT INTO provision_requests"
            " (id, provisioner, profile, job_id, token_jti, stage, created_at, attached_at,"
            " withdrawn) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id,"
            " token_jti = excluded.token_jti, stage = excluded.stage,"
            " attached_at = excluded.attached_at, withdrawn = excluded.withdrawn",
            (
                request.id,
                request.provisioner,
                request.profile,
                request.job_id,
                request.token_jti,
                request.stage,
                request.created_at,
                request.attached_at,
                request.withdrawn,
            ),
        )

    def delete(self, request_id: str) -> None:
        self._db.execute("DELETE FROM provision_requests WHERE id = ?", (request_id,))

    def load(self) -> list[MachineRequest]:
        rows = self._db.execute("SELECT * FROM provision_requests ORDER BY created_at")
        return [
            MachineRequest(
                id=row["id"],
                provisioner=row["provisioner"],
                profile=row["profile"],
                created_at=row["created_at"],
                stage=RequestStage(row["stage"]),
                job_id=row["job_id"],
                token_jti=row["token_jti"],
                attached_at=row["attached_at"],
                withdrawn=bool(row["withdrawn"]),
            )
            for row in rows
        ]

    def save_pause(self, profile: str, said: str | None) -> None:
        """``profile`` (``provisioner/profile``) was paused by hand, as ``said``; None: it
        was resumed."""
        if said is None:
            self._db.execute("DELETE FROM provision_pauses WHERE profile = ?", (profile,))
            return
        self._db.execute(
            "INSERT INTO provision_pauses (profile, said) VALUES (?, ?)"
            " ON CONFLICT (profile) DO UPDATE SET said = excluded.said",
            (profile, said),
        )

    def save_site(self, profile: str, limit: SiteLimit) -> None:
        """What ``profile``'s site allowed at its last reading."""
        self._db.execute(
            "INSERT INTO provision_sites (profile, reading) VALUES (?, ?)"
            " ON CONFLICT (profile) DO UPDATE SET reading = excluded.reading",
            (profile, json.dumps(dataclasses.asdict(limit))),
        )

    def sites(self) -> dict[str, SiteLimit]:
        rows = self._db.execute("SELECT profile, reading FROM provision_sites")
        return {row["profile"]: SiteLimit(**json.loads(row["reading"])) for row in rows}

    def pauses(self) -> dict[str, str]:
        rows = self._db.execute("SELECT profile, said FROM provision_pauses ORDER BY profile")
        return {row["profile"]: row["said"] for row in rows}
