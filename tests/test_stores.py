"""Every store keeps the same promises on both databases: SQLite in the data directory and
PostgreSQL (a real server, ``make postgres-up``). Each test runs once on each, with the
SQL the engine runs there, so that a statement only one of them understands fails here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.agent.realtime import realtime_monotonic
from fluksio.engine.call_saves import CallSaves
from fluksio.engine.database import Database
from fluksio.engine.datadir import DataDir
from fluksio.engine.key_places import KeyFiles, SealedKeys
from fluksio.engine.keys import KeyRing
from fluksio.engine.personal_tokens import PersonalTokenStore
from fluksio.engine.postgres.fence import Fence, Fenced
from fluksio.engine.postgres.lease import Lease
from fluksio.engine.postgres.opening import connector, open_postgres
from fluksio.engine.provision_requests import ProvisionRequestStore
from fluksio.engine.runs.items import ItemStore
from fluksio.engine.runs.machine.rows import ArraySummary, NodeRow, RunRow
from fluksio.engine.runs.store import FlowStore, RunStore
from fluksio.engine.scrape_tokens import ScrapeTokenStore
from fluksio.engine.secrets import SecretStore
from fluksio.engine.users import UserStore, check_password
from fluksio.engine.worker_tokens import WorkerTokenRecord, WorkerTokenStore
from fluksio.engine.workers.connection.holder import Holder
from fluksio.errors import ConfigError, NotAuthenticated
from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage
from fluksio.wire.states import NodeState, RunState
from tests.support.clock import ManualClock
from tests.support.databases import KINDS, opened
from tests.support.postgres import LocalPostgres

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(params=KINDS)
def database(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Database]:
    with opened(request.param, tmp_path, monkeypatch) as database:
        yield database


def test_users_are_added_once_and_the_last_superuser_stays(database: Database) -> None:
    users = UserStore(database)
    users.add("ada", "a password", is_superuser=True, cost=4)
    with pytest.raises(ConfigError, match="already exists"):
        users.add("ada", "another one", is_superuser=False, cost=4)
    users.add("bob", "a password", is_superuser=False, cost=4)
    assert users.count() == 2
    assert [(u.username, u.is_superuser) for u in users.all()] == [("ada", True), ("bob", False)]
    with pytest.raises(ConfigError, match="only superuser"):
        users.remove("ada")
    users.set_superuser("bob", True)
    users.remove("ada")
    bob = check_password(users.credentials("bob"), "a password")
    assert bob is not None and bob.is_superuser
    assert check_password(users.credentials("ada"), "a password") is None


def test_worker_tokens_revoked_are_unusable(database: Database) -> None:
    clock = ManualClock()
    tokens = WorkerTokenStore(database, clock)
    for jti in ("j1", "j2", "j3"):
        tokens.add(
            WorkerTokenRecord(
                jti, f"gpu-{jti}", ("gpu", "a100"), clock.now(), clock.now() + 60, "ada", None, None
            )
        )
    revoked = tokens.revoke("j2", "lost laptop")
    assert revoked is not None and revoked.revoked_reason == "lost laptop"
    assert tokens.unusable({"j1", "j2", "nobody's"}) == {"j2", "nobody's"}
    assert tokens.unusable(set()) == set()
    assert tokens.revoke_all("key rotated") == 2  # j2 keeps its first revocation
    found = tokens.get("j2")
    assert found is not None and found.revoked_reason == "lost laptop"
    assert [t.labels for t in tokens.list()] == [("gpu", "a100")] * 3


def test_personal_and_scrape_tokens_are_found_by_their_text_alone(database: Database) -> None:
    clock = ManualClock()
    personal = PersonalTokenStore(database, clock)
    text, record = personal.mint("ada", "laptop", days=1)
    assert personal.username_of(text) == "ada"
    personal.revoke(record.id)
    with pytest.raises(NotAuthenticated, match="revoked"):
        personal.username_of(text)
    scrape = ScrapeTokenStore(database, clock)
    scraping, scraper = scrape.mint("prometheus", created_by="ada")
    assert scrape.valid(scraping) and not scrape.valid(scraping + "x")
    scrape.revoke(scraper.id)
    assert not scrape.valid(scraping)


def test_secrets_round_trip_and_keep_replaced_values(database: Database, tmp_path: Path) -> None:
    clock = ManualClock()
    secrets = SecretStore(database, KeyFiles(DataDir(tmp_path / "data").ensure()), clock)
    secrets.put("db", "first value", ["gpu"])
    clock.advance(10)
    secrets.put("db", "second value", ["gpu", "cpu"])
    info = secrets.info("db")
    assert info is not None and info.labels == ("cpu", "gpu") and info.updated_at > info.created_at
    assert secrets.reveal("db", on_engine=False, worker_labels=["cpu"]) == "second value"
    # What a call given either value prints is blanked: the one replaced lately too.
    assert set(secrets.given_since(["db"], clock.now() - 60)) == {"first value", "second value"}
    assert secrets.delete("db") and not secrets.delete("db")
    assert secrets.list() == []


def _run(run_id: str, created_at: float, spec_nodes: list[str]) -> RunRow:
    spec = {"nodes": [{"id": node, "code": "..."} for node in spec_nodes]}
    return RunRow(run_id, "flow", spec, {"x": DIGEST}, RunState.RUNNING, created_at)


def test_runs_keep_their_nodes_in_the_flows_order(database: Database) -> None:
    flows, runs = FlowStore(database, ManualClock()), RunStore(database)
    assert flows.put("flow", {"nodes": []}) and not flows.put("flow", {"nodes": [1]})
    order = ["zeta", "alpha", "mid"]
    runs.create(_run("r1", 1.0, order), [NodeRow(n, NodeState.PENDING) for n in order])
    runs.create(_run("r2", 2.0, ["a"]), [NodeRow("a", NodeState.PENDING)])
    held = Holder("jti", "gpu-1", "pid-7")
    ended = NodeRow("alpha", NodeState.SUCCEEDED, call_id="c1", result={"y": 2}, holder=held)
    ended.checkpoint = ArtifactRef(digest=DIGEST, size=3)
    runs.save_many([("r1", [ended])])
    found = runs.get("r1")
    assert found is not None
    row, nodes = found
    assert [n.node_id for n in nodes] == order
    assert nodes[1].result == {"y": 2} and nodes[1].holder == held
    assert nodes[1].checkpoint == ArtifactRef(digest=DIGEST, size=3)
    assert [r.id for r in runs.find(flow="flow", state=None, limit=10)] == ["r2", "r1"]
    assert runs.referenced_digests() == {"ab" * 32}
    row.state, row.ended_at = RunState.SUCCEEDED, 5.0
    runs.save_many([], [row])
    assert [r.id for r, _ in runs.unfinished()] == ["r2"]
    assert runs.delete_ended_before(10.0, most=5) == ["r1"] and runs.get("r1") is None
    assert not runs.delete("r2")  # still running
    assert flows.delete_transient_before(100.0) == 0  # not transient


def test_array_items_page_count_and_run_again(database: Database) -> None:
    runs, items = RunStore(database), ItemStore(database)
    array = NodeRow("map", NodeState.RUNNING, array=ArraySummary(10))
    runs.create(_run("r", 1.0, ["map"]), [array])
    rows = [
        NodeRow("map", NodeState.SUCCEEDED, item=0, result={"v": 0}),
        NodeRow("map", NodeState.FAILED, item=1, error={"message": "boom"}),
        NodeRow("map", NodeState.RUNNING, item=2, holder=Holder("jti", "w", None)),
        NodeRow("map", NodeState.RUNNING, item=3),
    ]
    runs.save_many([("r", rows)])
    items.cancel_ahead("r", "map", [(7, 8)])
    items.cancel_ahead("r", "map", [(7, 9)])  # the same range, grown
    assert items.cancelled_ahead("r", "map") == [(7, 9)]
    page = items.page("r", "map", after=0, limit=10)
    assert [(p.item, p.state) for p in page][:3] == [
        (1, NodeState.FAILED),
        (2, NodeState.RUNNING),
        (3, NodeState.RUNNING),
    ]
    assert [p.item for p in page][3:] == [7, 8, 9]
    summary = items.summary("r", "map", total=10)
    assert summary.counts == {
        "succeeded": 1,
        "failed": 1,
        "running": 2,
        "cancelled": 3,
        "queued": 3,
    }
    assert [h.item for h in items.held("r", "map")] == [2]
    items.interrupted("r", "map", None, 9.0, spare_held=True)
    assert items.states("r", "map", 3, 3)[3].attempt == 2
    assert items.run_again("r", "map") == 1


def test_provisioning_requests_pauses_and_sites_outlast_the_engine(database: Database) -> None:
    store = ProvisionRequestStore(database)
    request = MachineRequest("q1", "slurm", "gpu", 1.0, RequestStage.QUEUED, job_id="42")
    request.withdrawn = True
    store.save(request)
    request.attached_at = 2.0
    store.save(request)
    (loaded,) = store.load()
    assert (loaded.job_id, loaded.attached_at, loaded.withdrawn) == ("42", 2.0, True)
    store.delete("q1")
    assert store.load() == []
    store.save_pause("gpu", "paused by ada")
    store.save_pause("cpu", "paused by bob")
    store.save_pause("cpu", None)
    assert store.pauses() == {"gpu": "paused by ada"}
    store.save_site("gpu", SiteLimit(most_jobs=2, why_most="QOS"))
    store.save_site("gpu", SiteLimit(most_jobs=3, why_most="QOS"))
    assert store.sites()["gpu"].most_jobs == 3


def test_a_checkpoint_names_only_what_its_call_saved(database: Database) -> None:
    saves = CallSaves(database, ManualClock())
    saves.add("call-1", DIGEST, 3)
    saves.add("call-1", DIGEST, 3)  # uploaded twice: one row
    assert saves.refusal("call-1", ArtifactRef(digest=DIGEST, size=3)) is None
    assert saves.refusal("call-2", ArtifactRef(digest=DIGEST, size=3)) is not None


def test_the_engines_keys_are_made_once_sealed_and_opened_only_with_their_key(
    database: Database,
) -> None:
    """Two engines starting on one empty database agree on one signing key; what the
    database holds of it is no key, and another key file cannot open it."""
    first, second = SealedKeys(database, b"k" * 32), SealedKeys(database, b"k" * 32)
    assert KeyRing(first).current().kid == KeyRing(second).current().kid
    made = first.create_once("secrets", b"a secret key")
    assert second.create_once("secrets", b"another one") == made == b"a secret key"
    stored = database.execute("SELECT sealed FROM engine_keys WHERE name = 'secrets'").fetchone()
    assert b"a secret key" not in bytes(stored["sealed"])
    with pytest.raises(ConfigError, match="sealed under another --database-key-file"):
        SealedKeys(database, b"x" * 32).read("secrets")
    rotated = KeyRing(first).rotate()
    assert KeyRing(SealedKeys(database, b"k" * 32)).current().kid == rotated.kid


@pytest.mark.contract
def test_a_write_under_a_lease_another_engine_took_is_refused_and_leaves_nothing(
    pg_cluster: LocalPostgres, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence every write of the active engine checks: once another engine holds the
    lease, a write of the one before is refused whole and it is told to step down."""
    monkeypatch.setenv("PGPASSFILE", pg_cluster.passfile)
    connect = connector(pg_database, None)
    database = open_postgres(pg_database)  # migrated: the lease's table is there
    database.close()
    first = Lease(connect, holder="first", address="http://first", length_s=60)
    second = Lease(connect, holder="second", address="http://second", length_s=60)
    epoch = first.take()
    assert epoch is not None and second.take() is None  # not run out: nobody takes it
    told: list[str] = []
    fenced = open_postgres(
        pg_database, fence=Fence(epoch, told.append, held_until=realtime_monotonic() + 60)
    )
    users = UserStore(fenced)
    users.add("ada", "a password", is_superuser=True, cost=4)
    with pg_cluster.connect(pg_database) as admin:
        admin.execute("UPDATE engine_lease SET expires_at = 0")  # it ran out unrenewed
    assert second.take() == epoch + 1
    with pytest.raises(Fenced, match="http://second"):
        users.add("bob", "a password", is_superuser=False, cost=4)
    assert told and "steps down" in told[0]
    assert [u.username for u in users.all()] == ["ada"]  # reads go on; nothing was written
    assert not first.renew(epoch) and second.renew(epoch + 1)
    # The lease's epoch, but past the time the engine is sure of it (it was paused): what
    # would follow the write (a job submitted) must not, so the write is refused too.
    lapsed = open_postgres(
        pg_database, fence=Fence(epoch + 1, told.append, held_until=realtime_monotonic() - 1)
    )
    with pytest.raises(Fenced, match="by its own clock"):
        UserStore(lapsed).add("carol", "a password", is_superuser=False, cost=4)
    lapsed.close()
    fenced.close()
    first.close()
    second.close()
