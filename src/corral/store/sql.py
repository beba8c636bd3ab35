"""SqlStore: the StateStore over SQLAlchemy 2, for SQLite (default) and PostgreSQL alike."""

from __future__ import annotations

import json
import threading
import time
from collections import namedtuple
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from sqlalchemy import (
    Select,
    Table,
    Text,
    bindparam,
    case,
    create_engine,
    event,
    func,
    insert,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, InvalidatePoolError
from sqlalchemy.orm import Session, sessionmaker

from corral.core.arrays import assign_array_ids, compute_array_group
from corral.core.containers import container_from_dict, container_to_dict
from corral.core.errors import ConflictError
from corral.core.resources import GpuInfo
from corral.core.staging import IN_STAGED, IN_STAGING, OUT_PENDING, OUT_RUNNING, parse_stage_in, parse_stage_out
from corral.core.states import JobState, can_transition, compute_sources
from corral.core.tenancy import check_active_limit, count_by_tenant
from corral.scheduler.recheck import NodeUse, add_node_use, compute_node_use, compute_recheck
from corral.store.base import StateStore
from corral.store.directory import DirectoryMethods
from corral.store.idempotency import IdempotencyMethods
from corral.store.identity import NodeIdentityMethods
from corral.store.logins import LoginFailureMethods
from corral.store.operations import NodeAdminMethods
from corral.store.pools import PoolMethods
from corral.store.protocols import SchedulingStore
from corral.store.records import (
    GpuStatus,
    Job,
    JobEvent,
    JobSpec,
    Node,
    NodeWork,
    Pool,
    Queue,
    Quota,
    SubmitLists,
    TokenRecord,
    User,
    compute_placed_parts,
)
from corral.store.replicas import ReplicaMethods
from corral.store.schedules import ScheduleMethods
from corral.store.secrets import SecretMethods
from corral.store.services import ServiceMethods
from corral.store.sqlite_gate import WriteGate
from corral.store.tables import (
    NODE_SHAPES,
    NODES,
    SUBMIT_RULES,
    ChangeCounterRow,
    GpuRow,
    JobEventRow,
    JobRow,
    NodeRow,
    TenantRow,
    TokenRow,
    UserRow,
)
from corral.store.telemetry import TelemetryMethods
from corral.store.tenancy import TenancyMethods, affected_rows, to_token, to_user
from corral.store.tenancy import utc as _utc


def normalize_url(url: str) -> str:
    """`postgresql://` means psycopg 3 here (SQLAlchemy would otherwise pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


# PostgreSQL (any server database): a pooled connection idle for longer is pinged before use (_IdlePing)
PING_IDLE_S = 1.0

_AUTH_WRITES = tuple(
    f"{verb} {table.upper()}"
    for verb in ("UPDATE", "DELETE FROM")
    for table in (TokenRow.__tablename__, UserRow.__tablename__)
)
_decode_json = json.JSONDecoder().decode


def _json_loads(data: bytes | str) -> Any:
    """psycopg's JSON loader: json.loads(bytes) first sniffs the encoding; PostgreSQL sends UTF-8. This makes a
    page of 500 jobs (8 JSON columns each) ~2.5x cheaper to decode."""
    return _decode_json(data if isinstance(data, str) else str(data, "utf-8"))


def _copied(value: Any) -> Any:
    """A JSON value with every list in it new (the rest is immutable)."""
    return [_copied(x) for x in value] if isinstance(value, list) else value


class _IdlePing:
    """Pings a pooled connection before use when it sat idle in the pool for more than PING_IDLE_S (a database
    restart, a proxy or firewall that drops idle connections, idle_session_timeout), and swaps a dead one for a
    new connection before the caller sees it (InvalidatePoolError raised in a checkout listener makes the pool
    connect again, and drop its other connections made before). A connection back in the pool for less is used as
    it is: one that died in that second fails
    its statement once (the request fails: 503, nothing of that transaction done), and SQLAlchemy then drops every
    connection of the pool made before (as on any disconnect). A server database, PostgreSQL, only: SQLite's file
    needs no ping.
    pool_pre_ping pinged on every checkout, one more round trip per transaction, which a busy server pays on
    every request."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def attach(self) -> None:
        event.listen(self._engine.pool, "checkin", self._checked_in)
        event.listen(self._engine.pool, "checkout", self._checked_out)

    @staticmethod
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()  # cleared when the record connects anew

    def _checked_out(self, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")  # none: a new connection
        if since is None or time.monotonic() - since <= PING_IDLE_S:
            return
        try:
            self._engine.dialect.do_ping(dbapi_conn)
        except Exception as e:  # any failure: the pool drops this one and connects again
            # the whole pool: its other connections made before are as dead (a restart), each replaced before use
            raise InvalidatePoolError(f"an idle pooled connection failed its ping: {e}") from e


def _postgres_json(dbapi_conn: Any, _record: Any) -> None:
    from psycopg.types.json import set_json_loads

    set_json_loads(_json_loads, getattr(dbapi_conn, "driver_connection", dbapi_conn))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers don't block the writer
    cur.execute("PRAGMA synchronous=FULL")  # an accepted job survives a power cut, not only kill -9
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class SqlStore(
    TenancyMethods,
    NodeAdminMethods,
    NodeIdentityMethods,
    TelemetryMethods,
    ScheduleMethods,
    ServiceMethods,
    PoolMethods,
    DirectoryMethods,
    SecretMethods,
    LoginFailureMethods,
    IdempotencyMethods,
    ReplicaMethods,
):
    """One implementation for both databases; dialect differences stay inside this class."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict[str, Any] = {"future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            # no pool_pre_ping: that pings on every checkout, a round trip per transaction (~0.3 ms of this
            # process's CPU); _IdlePing pings only a connection that sat idle in the pool (see there)
            # LIFO: the connections in use stay warm and the rest age out, rather than each being idle about
            # pool-size times the gap between transactions (and pinged again)
            kwargs.update(pool_size=10, max_overflow=20, pool_use_lifo=True)
        self.engine: Engine = create_engine(self.url, **kwargs)
        self.write_gate: WriteGate | None = None  # SQLite: this process's writers queue here, not in its busy handler
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            self.write_gate = WriteGate()
            self.write_gate.attach(self.engine)
        else:
            _IdlePing(self.engine).attach()
            if self.url.startswith("postgresql+psycopg"):
                event.listen(self.engine, "connect", _postgres_json)
        # Bumped whenever a statement writes the tokens or users table through this store, and again when that
        # transaction's connection goes back to the pool (after its commit or rollback): the server's credential
        # cache (corral.server.auth) drops what it read before.
        self.auth_epoch = 0
        event.listen(self.engine, "before_cursor_execute", self._note_auth_write)
        event.listen(self.engine.pool, "checkin", self._after_auth_write)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # the jobs that pages of list_jobs read, by id: ((row version, created_at), job); a page loads again only
        # rows that changed
        self._paged: dict[int, tuple[tuple[int, Any], Job]] = {}
        self._paged_lock = threading.Lock()
        # SQLite has no SELECT ... FOR UPDATE: read-modify-write methods take this lock instead, so two
        # threads (two agents' syncs) cannot both read the old row and lose one update.
        self._rmw_lock = threading.Lock()
        self._node_shapes: tuple[int, list[Node]] | None = None  # _node_shapes_at: (counter, nodes)
        self._nodes_kept: tuple[int, list[Node]] | None = None  # list_nodes: (counter, nodes)
        # read_submit_lists: (counter, the pools, each tenant's (queues, quotas) read since the counter was that)
        self._submit_rules: tuple[int, list[Pool], dict[int, tuple[list[Queue], list[Quota]]]] | None = None

    def _note_auth_write(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip()[:40].upper().startswith(_AUTH_WRITES):
            conn.info["auth_write"] = True
            self.auth_epoch += 1

    def _after_auth_write(self, _dbapi_conn: Any, record: Any) -> None:
        if record is not None and record.info.pop("auth_write", False):
            self.auth_epoch += 1

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    # used by the mixins (a firing inserts its job in the schedule's transaction)
    _insert_job = staticmethod(lambda s, spec, now: insert_job(s, spec, now))
    _insert_jobs = staticmethod(lambda s, specs, now, max_active=None: insert_jobs(s, specs, now, max_active))
    _to_job = staticmethod(lambda row: _job(row))

    @contextmanager
    def _rmw(self) -> Iterator[Session]:
        """A transaction for read-modify-write: rows are locked FOR UPDATE (PostgreSQL) or serialised (SQLite)."""
        if self.is_sqlite:
            with self._rmw_lock, self._tx() as session:
                yield session
        else:
            with self._tx() as session:
                yield session

    def migrate(self) -> None:
        from corral.store.migrate import upgrade_to_head

        upgrade_to_head(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # ---- users and tokens -------------------------------------------------
    def create_user(
        self, name: str, role: str, now: datetime, tenant_id: int | None = None, password_hash: str = ""
    ) -> User:
        try:
            with self._tx() as s:
                row = UserRow(name=name, role=role, created_at=now, tenant_id=tenant_id, password_hash=password_hash)
                s.add(row)
                s.flush()
                return to_user(row)
        except IntegrityError as e:
            raise ConflictError(f"user {name!r} already exists") from e

    def get_user(self, user_id: int) -> User | None:
        with self._tx() as s:
            row = s.get(UserRow, user_id)
            return to_user(row) if row else None

    def count_users(self) -> int:
        with self._tx() as s:
            return int(s.scalar(select(func.count()).select_from(UserRow)) or 0)

    def create_token(
        self,
        token_hash: str,
        kind: str,
        name: str,
        user_id: int | None,
        now: datetime,
        expires_at: datetime | None = None,
        *,
        is_session: bool = False,
        parent_id: int | None = None,
    ) -> TokenRecord:
        """`is_session`: a login session (ends with a password change); `parent_id`: the token it was opened with."""
        with self._tx() as s:
            row = TokenRow(
                token_hash=token_hash,
                kind=kind,
                name=name,
                user_id=user_id,
                created_at=now,
                revoked=False,
                expires_at=expires_at,
                is_session=is_session,
                parent_id=parent_id,
            )
            s.add(row)
            s.flush()
            return to_token(row)

    def find_token(self, token_hash: str) -> TokenRecord | None:
        with self._tx() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.token_hash == token_hash, TokenRow.revoked.is_(False)))
            return to_token(row) if row else None

    # ---- nodes ------------------------------------------------------------
    def upsert_node(
        self,
        name: str,
        hostname: str,
        backend: str,
        cpu_milli: int,
        memory_mib: int,
        labels: dict[str, str],
        gpus: Sequence[GpuInfo],
        now: datetime,
        address: str = "",
        isolation: str = "",
        runtimes: Sequence[str] = ("process",),
    ) -> Node:
        with self._tx() as s:
            row = s.get(NodeRow, name)
            if row is None:
                row = NodeRow(name=name, registered_at=now)
                s.add(row)
            row.hostname, row.backend, row.isolation = hostname, backend, isolation
            row.runtimes = list(runtimes)
            row.cpu_milli, row.memory_mib, row.labels = cpu_milli, memory_mib, dict(labels)
            row.address = address or hostname
            row.state, row.last_heartbeat_at = "READY", now
            # health and admin state follow the physical GPU (its UUID) across re-registrations
            kept = {
                g.uuid: (g.healthy, g.health_reason, g.disabled)
                for g in s.scalars(select(GpuRow).where(GpuRow.node_name == name)).all()
            }
            s.query(GpuRow).filter(GpuRow.node_name == name).delete()
            s.flush()
            for g in gpus:
                healthy, reason, disabled = kept.get(g.uuid, (g.healthy, "" if g.healthy else "reported", False))
                s.add(
                    GpuRow(
                        node_name=name,
                        index=g.index,
                        uuid=g.uuid,
                        model=g.model,
                        memory_mib=g.memory_mib,
                        pci_bus_id=g.pci_bus_id,
                        numa_node=g.numa_node,
                        nvlink_peers=list(g.nvlink_peers),
                        pcie_switch=g.pcie_switch,
                        ecc_enabled=g.ecc_enabled,
                        healthy=healthy and g.healthy,
                        health_reason=reason,
                        disabled=disabled,
                    )
                )
            s.flush()
            return self._node(s, row)

    def get_node(self, name: str) -> Node | None:
        with self._tx() as s:
            row = s.get(NodeRow, name)
            return self._node(s, row) if row else None

    def list_nodes(self) -> list[Node]:
        """Every node with its GPUs, by name. The list read last is kept under the `nodes` counter (migration 0032):
        while the counter stays, only each node's state and last heartbeat (which every agent's sync writes) are
        read again, one small query instead of every node and GPU row (1,000 nodes and 8,000 GPUs each scheduling
        pass and each GET /api/v1/nodes; issue 13). The counter is read first: a change between the reads makes
        the next call read everything again, so a list is never older than the counter it is kept under."""
        with self._tx() as s:
            conn = s.connection()
            version = conn.execute(_NODES_COUNTER).scalar()
            kept = self._nodes_kept
            if version is not None and kept is not None and kept[0] == version:
                live = conn.execute(_NODES_LIVE).all()
                nodes = _with_live(kept[1], live)
                if nodes is not None:
                    self._nodes_kept = (version, nodes)
                    return list(nodes)
            rows = conn.execute(_ALL_NODES).all()
            gpus = conn.execute(_ALL_GPUS).all()
        by_node: dict[str, list[tuple[GpuInfo, GpuStatus]]] = {}
        for g in gpus:
            by_node.setdefault(g[0], []).append(_gpu_of_columns(g))
        fresh = [_node_of_columns(r, by_node.get(r[0], ())) for r in rows]
        # no counter (a schema before 0032, for a while): nothing is kept
        self._nodes_kept = (version, fresh) if version is not None else None
        return list(fresh)

    def _node_shapes_at(self, version: int | None) -> list[Node]:
        """list_nodes as kept for the `node_shapes` counter at `version` (read just before; migration 0029), or read
        now and kept (read only): one small query instead of every node and GPU row while no shape changed."""
        kept = self._node_shapes
        if version is not None and kept is not None and kept[0] == version:
            return kept[1]
        nodes = self.list_nodes()
        # no counter (a schema without it, for a while): nothing is kept, nor anything kept before trusted again
        self._node_shapes = (version, nodes) if version is not None else None
        return nodes

    def read_submit_lists(self, tenant_id: int) -> SubmitLists:
        """What a submission is checked against: the tenant's queues and quotas, the cloud pools (each as
        list_queues, list_quotas and list_pools give them) and the nodes' shapes (_node_shapes_at), as this store
        last read them. Both counters are read in one small query; the lists are read again only when theirs moved
        (`submit_rules`, migration 0031; `node_shapes`, 0029). The counters are read first, so a change between
        the reads makes the next call read again; a list is never older than the counter it is kept under."""
        with self._tx() as s:
            versions: dict[str, int] = {name: v for name, v in s.connection().execute(_SUBMIT_COUNTERS).all()}
        version = versions.get(SUBMIT_RULES)
        kept = self._submit_rules
        if version is None or kept is None or kept[0] != version:
            kept = (version if version is not None else -1, self.list_pools(), {})
            self._submit_rules = kept if version is not None else None  # as _node_shapes_at without a counter
        tenant = kept[2].get(tenant_id)
        if tenant is None:
            tenant = (self.list_queues(tenant_id), self.list_quotas(tenant_id))
            if version is not None:
                if len(kept[2]) >= _MAX_KEPT_TENANTS:
                    kept[2].clear()
                kept[2][tenant_id] = tenant
        nodes = self._node_shapes_at(versions.get(NODE_SHAPES))
        return SubmitLists(list(tenant[0]), list(tenant[1]), list(kept[1]), list(nodes))

    def touch_node(self, name: str, now: datetime) -> bool:
        with self._tx() as s:
            res = s.execute(update(NodeRow).where(NodeRow.name == name).values(last_heartbeat_at=now, state="READY"))
            return bool(affected_rows(res))

    def mark_nodes_lost(self, heartbeat_before: datetime) -> list[str]:
        silent = (NodeRow.state == "READY", NodeRow.last_heartbeat_at < heartbeat_before)
        with self._tx() as s:
            names = sorted(s.scalars(select(NodeRow.name).where(*silent)).all())
            if not names:
                return []
            self._lock_nodes(s, names)  # in name order, as assigns lock them: the two never deadlock
            names = sorted(s.scalars(select(NodeRow.name).where(NodeRow.name.in_(names), *silent)).all())
            s.execute(update(NodeRow).where(NodeRow.name.in_(names)).values(state="LOST"))
            return names

    def _node(self, s: Session, row: NodeRow) -> Node:
        gpus = s.scalars(select(GpuRow).where(GpuRow.node_name == row.name).order_by(GpuRow.index)).all()
        return _node(row, gpus)

    # ---- jobs -------------------------------------------------------------
    def create_job(self, spec: JobSpec, now: datetime) -> Job:
        with self._tx() as s:
            return _job(insert_job(s, spec, now))

    def create_jobs(self, specs: Sequence[JobSpec], now: datetime, max_active: int | None = None) -> list[Job]:
        with self._rmw() if max_active is not None else self._tx() as s:
            return [_job(r) for r in insert_jobs(s, specs, now, max_active)]

    def get_job(self, job_id: int) -> Job | None:
        with self._tx() as s:
            row = s.get(JobRow, job_id)
            return _job(row) if row else None

    def get_jobs(self, job_ids: Iterable[int]) -> list[Job]:
        ids = sorted(set(job_ids))
        if not ids:
            return []
        with self._tx() as s:
            return _jobs_of(s.connection().execute(_JOBS_BY_ID_ORDERED, {"ids": list(ids)}).all())

    def list_jobs_changed(
        self, states: Sequence[JobState], known: Mapping[int, int]
    ) -> tuple[list[int], list[tuple[Job, int]]]:
        """Ids and versions first (the (state, id) index), then the rows whose version differs, in chunks."""
        with self._tx() as s:
            conn = s.connection()
            pairs = conn.execute(_IDS_VERSIONS, {"states": [st.value for st in states]}).all()
            stale = [i for i, v in pairs if known.get(i) != v]
            loaded = [(j, r.row_version) for r, j in _rows_by_id(conn, stale)]
            return [i for i, _ in pairs], loaded

    def list_job_ids(self, states: Sequence[JobState], limit: int) -> list[int]:
        with self._tx() as s:
            q = select(JobRow.id).where(JobRow.state.in_([st.value for st in states]))
            return list(s.scalars(q.order_by(JobRow.id.desc()).limit(limit)).all())

    def list_jobs(
        self,
        states: Sequence[JobState] | None = None,
        limit: int | None = None,
        tenant_id: int | None = None,
        newest_first: bool = False,
        before_id: int | None = None,
        node: str | None = None,
        schedule_id: int | None = None,
        after_id: int | None = None,
        array_id: int | None = None,
        user_id: int | None = None,
        name_contains: str | None = None,
        service_id: int | None = None,
    ) -> list[Job]:
        """A page (`limit`) reads ids and row versions first, then only the rows it does not hold at that version
        (kept from earlier pages, as JobCache keeps the scheduler's): the API's lists are read again and again, and
        turning rows into jobs was half of a page's cost. Several states are read as one range per state, merged:
        `state IN (...) ORDER BY id` made PostgreSQL walk the primary key past every finished job (16 ms for the
        first page of pending and running jobs among 100,000 finished ones) and SQLite sort them all."""
        where = _PageFilter(
            tenant_id, user_id, name_contains, node, array_id, schedule_id, service_id, before_id, after_id
        )
        with self._tx() as s:
            conn = s.connection()
            if limit is None:
                return _jobs_of(conn.execute(_page_query(_SELECT_JOBS, states, where, newest_first, None)).all())
            page = _page_query(cast(Select[Any], _IDS_AND_VERSIONS), states, where, newest_first, limit)
            # (id, (row version, created_at)): the creation time too, so that a row made again under the same id
            # (SQLite reuses the largest id of a deleted row; no code deletes jobs, an operator might) is not the
            # kept one
            listed: list[tuple[int, tuple[int, Any]]] = [(r[0], (r[1], r[2])) for r in conn.execute(page)]
            held: dict[int, Job] = {}
            stale: list[int] = []
            paged = self._paged
            for job_id, version in listed:
                kept = paged.get(job_id)
                if kept is not None and kept[0] == version:
                    held[job_id] = kept[1]
                else:
                    stale.append(job_id)
            versions = dict(listed)
            loaded = [((r.row_version, r.created_at), j) for r, j in _rows_by_id(conn, stale)]
            if len(loaded) != len(stale) or any(versions[j.id] != v for v, j in loaded):
                # a row changed (or went) between the two reads, each its own snapshot on PostgreSQL: read the
                # page whole in one statement instead
                return _jobs_of(conn.execute(_page_query(_SELECT_JOBS, states, where, newest_first, limit)).all())
        with self._paged_lock:
            if len(paged) + len(loaded) > _MAX_PAGED:
                paged.clear()
            for version, job in loaded:
                held[job.id] = job
                if _kept_size(job) <= _MAX_PAGED_JOB_BYTES:  # a large command or environment is read each time
                    paged[job.id] = (version, job)
        return [held[job_id] for job_id, _ in listed]

    def list_gpu_holders(self) -> list[tuple[int, str | None, list[int], list[Any], int]]:
        """(job id, node, GPU indices, parts, gpu_milli) of RUNNING jobs: only what an inventory view needs."""
        with self._tx() as s:
            rows = s.execute(
                select(JobRow.id, JobRow.node, JobRow.gpu_indices, JobRow.parts, JobRow.gpu_milli).where(
                    JobRow.state == JobState.RUNNING.value
                )
            ).all()
            return [(r[0], r[1], list(r[2] or []), list(r[3] or []), r[4]) for r in rows]

    def list_runs_between(
        self, start: datetime, end: datetime, tenant_id: int | None = None, with_placement: bool = True
    ) -> list[tuple[Any, ...]]:
        """Columns of the jobs whose run overlaps [start, end), for usage reports: (id, tenant_id, user_id, gpus,
        gpu_milli, nodes, started_at, finished_at, node, gpu_indices, parts, mean GPU utilisation). Without
        `with_placement`, gpu_indices and parts come back empty (cheaper: no JSON to decode)."""
        util = JobRow.gpu_summary["utilization_avg_pct"].as_float()
        # The placement columns as their JSON text, each distinct text decoded once: a month's runs hold a few
        # thousand distinct placements among their ~10,000 jobs, and decoding was a third of a report.
        placement = (
            (sql_cast(JobRow.gpu_indices, Text), sql_cast(JobRow.parts, Text))
            if with_placement
            else (JobRow.id, JobRow.id)
        )
        with self._tx() as s:
            q = select(
                JobRow.id,
                JobRow.tenant_id,
                JobRow.user_id,
                JobRow.gpus,
                JobRow.gpu_milli,
                JobRow.nodes,
                JobRow.started_at,
                JobRow.finished_at,
                JobRow.node,
                *placement,
                util,
            ).where(
                JobRow.started_at.is_not(None),
                JobRow.started_at < end,
                (JobRow.finished_at.is_(None)) | (JobRow.finished_at >= start),
                JobRow.gpus > 0,
            )
            if tenant_id is not None:
                q = q.where(JobRow.tenant_id == tenant_id)
            rows = s.connection().execute(q.order_by(JobRow.id)).all()  # column tuples: no ORM loading per row
            if not with_placement:
                return [(*r[:6], _utc(r[6]), _utc(r[7]), r[8], [], [], r[11]) for r in rows]
            decoded: dict[str | None, list[Any]] = {None: []}

            def load(text: str | None) -> list[Any]:
                got = decoded.get(text)
                if got is None:
                    got = decoded[text] = _decode_json(text) or []  # type: ignore[arg-type]
                return [_copied(x) for x in got]  # a caller's own lists, nested ones too (never shared by two rows)

            return [(*r[:6], _utc(r[6]), _utc(r[7]), r[8], load(r[9]), load(r[10]), r[11]) for r in rows]

    def count_jobs(
        self,
        states: Sequence[JobState] | None = None,
        tenant_id: int | None = None,
        user_id: int | None = None,
        name_contains: str | None = None,
        node: str | None = None,
        array_id: int | None = None,
    ) -> int:
        with self._tx() as s:
            q = select(func.count()).select_from(JobRow)
            q = _where_job(q, states, tenant_id, user_id, name_contains, node, array_id)
            return int(s.scalar(q) or 0)

    def count_jobs_by_tenant(self, states: Sequence[JobState]) -> dict[int | None, int]:
        with self._tx() as s:
            q = (
                select(JobRow.tenant_id, func.count())
                .where(JobRow.state.in_([st.value for st in states]))
                .group_by(JobRow.tenant_id)
            )
            return {tenant_id: int(n) for tenant_id, n in s.execute(q).all()}

    def list_node_jobs(self, node: str) -> list[Job]:
        """RUNNING jobs with a part on `node` (a gang's job is listed on each of its nodes)."""
        with self._tx() as s:
            return _node_jobs(s.connection(), node)

    def get_node_with_jobs(self, name: str) -> tuple[Node | None, list[Job]]:
        """get_node and list_node_jobs in one transaction (a telemetry batch reads both: each transaction is a pool
        checkout and, on PostgreSQL, a BEGIN and a COMMIT, each a round trip)."""
        with self._tx() as s:  # column tuples, not ORM rows: an agent's every sync and telemetry batch reads this
            return self._nodes_named(s, (name,)).get(name), _node_jobs(s.connection(), name)

    def assign_job(self, job_id: int, node: str, gpu_indices: Sequence[int], now: datetime) -> bool:
        """One-part assign_job_parts (tests and tools): the same compare-and-set and capacity re-check."""
        return self._assign(job_id, [(node, tuple(gpu_indices))], now)

    def assign_job_parts(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        """PENDING -> RUNNING with one part per node, all at once (a gang never holds part of the pool), after
        re-checking every touched node against the store in the same transaction (protocols.JobStore)."""
        return self._assign(job_id, parts, now)

    def assign_jobs_parts(
        self, assignments: Sequence[tuple[int, Sequence[tuple[str, Sequence[int]]]]], now: datetime
    ) -> list[bool]:
        """assign_job_parts for each, in one transaction: the touched nodes are locked, read and their use summed
        once; each admission is re-checked against that use, which then counts it. The admissions that pass are
        written by one statement run for all of them (each row still guarded by its state), and their events by
        another."""
        if not assignments:
            return []
        names = sorted({n for _, parts in assignments for n, _ in parts})
        with self._rmw() as s:
            self._lock_nodes(s, names)  # from here until commit no other assign can change these nodes' use
            nodes, use = self._nodes_named(s, names), self._use_on(s, names)
            ids = [job_id for job_id, _ in assignments]
            rows: dict[int, Any] = {
                r.id: r
                for at in range(0, len(ids), _IN_CHUNK)
                for r in cast(
                    Iterable[Any],
                    map(_JobColumns._make, s.connection().execute(_JOBS_BY_ID, {"ids": ids[at : at + _IN_CHUNK]})),
                )
            }
            placed: dict[int, Sequence[tuple[str, Sequence[int]]]] = {}
            for job_id, parts in assignments:
                row = rows.get(job_id)
                if row is None or job_id in placed or row.state not in _sources(JobState.RUNNING):
                    continue
                spec = _job(row).spec
                if compute_recheck(parts, spec.request, nodes, use) is not None:
                    continue
                add_node_use(use, [(parts, spec.gpu_milli, spec.cpu_milli, spec.memory_mib)])
                placed[job_id] = parts
            done = self._write_assigns(s, placed, {i: rows[i].attempt for i in placed}, now)
            return [job_id in done and placed[job_id] is parts for job_id, parts in assignments]

    def _assign(self, job_id: int, parts: Sequence[tuple[str, Sequence[int]]], now: datetime) -> bool:
        return self.assign_jobs_parts([(job_id, parts)], now)[0]

    def _write_assigns(
        self,
        s: Session,
        placed: Mapping[int, Sequence[tuple[str, Sequence[int]]]],
        attempts: Mapping[int, int],
        now: datetime,
    ) -> set[int]:
        """Within an assign's transaction, its nodes locked: PENDING -> RUNNING for each job in `placed` (already
        re-checked), by one UPDATE run for every job, each row guarded by its state. Returns the jobs it moved
        (all of them, unless a job's state changed since it was read: then they are told by a read of the rows
        this attempt marked: its start time and its next attempt number). An event per moved job."""
        if not placed:
            return set()
        params = [
            {
                "b_id": job_id,
                "b_node": parts[0][0],
                "b_gpus": list(parts[0][1]),
                "b_parts": [[n, list(g)] for n, g in parts],
                "b_node_list": _name_list(n for n, _ in parts),
                "b_now": now,
            }
            for job_id, parts in placed.items()
        ]
        res = s.connection().execute(_ASSIGN, params)
        done = set(placed)
        if affected_rows(res) != len(placed):  # one changed meanwhile (another replica): which did this move?
            marked = s.execute(
                select(JobRow.id, JobRow.attempt).where(
                    JobRow.id.in_(list(placed)), JobRow.state == JobState.RUNNING.value, JobRow.started_at == now
                )
            ).all()
            done = {i for i, attempt in marked if attempt == attempts[i] + 1}
        events = [
            {
                "job_id": job_id,
                "at": now,
                "kind": "assigned",
                "message": "; ".join(f"node {n}, GPUs {','.join(map(str, g)) or 'none'}" for n, g in parts),
            }
            for job_id, parts in placed.items()
            if job_id in done
        ]
        if events:
            s.connection().execute(insert(_JOB_EVENTS), events)
        return done

    def _lock_nodes(self, s: Session, names: Sequence[str]) -> None:
        """Serialise assigns that touch these nodes: PostgreSQL locks their rows in name order (no deadlock);
        SQLite takes the database's write lock now, before reading, so another process cannot commit in between
        (threads of this process already wait on _rmw_lock)."""
        s.connection().execute(_LOCK_NODES_SQLITE if self.is_sqlite else _LOCK_NODES, {"names": list(names)})

    def _nodes_named(self, s: Session, names: Sequence[str]) -> dict[str, Node]:
        """These nodes (two queries, as list_nodes: column tuples, not ORM rows)."""
        conn = s.connection()  # Core, not the ORM's execute: no ORM entities here
        rows = conn.execute(_NODES_NAMED, {"names": list(names)}).all()
        gpus = conn.execute(_GPUS_NAMED, {"names": list(names)}).all()
        by_node: dict[str, list[tuple[GpuInfo, GpuStatus]]] = {}
        for g in gpus:
            by_node.setdefault(g[0], []).append(_gpu_of_columns(g))
        return {r[0]: _node_of_columns(r, by_node.get(r[0], ())) for r in rows}

    def _use_on(self, s: Session, names: Sequence[str]) -> dict[str, NodeUse]:
        """What RUNNING jobs hold on these nodes (a gang counts on each of its nodes): the jobs whose first part is
        on one of them (the (node, state) index) and the running gangs (their partial index), each job once; parts
        on other nodes are left out by name."""
        conn = s.connection()
        rows = {r[0]: r for r in conn.execute(_USE_ON_NODES, {"names": list(names)})}
        rows.update((r[0], r) for r in conn.execute(_USE_OF_GANGS))
        return compute_node_use(
            ((compute_placed_parts(r[1], r[2] or (), r[3] or []), r[4], r[5], r[6]) for r in rows.values()),
            only=names,
        )

    def mark_delivered(self, job_ids: Sequence[int], node: str | None = None) -> None:
        """Note that `node`'s agent holds its part of these RUNNING jobs."""
        if not job_ids:
            return
        with self._rmw() as s:
            conn = s.connection()
            # Three columns, not the job's whole row through the ORM: every report of a new run comes here.
            q = _DELIVERY_OF if self.is_sqlite else _DELIVERY_OF_LOCKED
            changes = []
            for job_id, delivered, nodes in conn.execute(q, {"ids": list(job_ids)}):
                new_nodes = nodes
                if node and f",{node}," not in (nodes or ","):
                    new_nodes = (nodes or ",") + f"{node},"
                if not delivered or new_nodes != nodes:  # nothing new: no write (the row's version stays)
                    changes.append({"b_id": job_id, "b_nodes": new_nodes})
            if changes:
                conn.execute(_SET_DELIVERED, changes)

    def set_job_port(self, job_id: int, port: int) -> bool:
        """Record the web-UI port Corral assigned to a RUNNING job on its node."""
        with self._tx() as s:
            res = s.execute(
                update(JobRow).where(JobRow.id == job_id, JobRow.state == JobState.RUNNING.value).values(port=port)
            )
            return bool(affected_rows(res))

    def set_image_digest(self, job_id: int, attempt: int, digest: str) -> bool:
        with self._tx() as s:
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.attempt == attempt, JobRow.state == JobState.RUNNING.value)
                .values(image_digest=digest[:255])
            )
            return bool(affected_rows(res))

    def move_job_parts(self, job_id: int, attempt: int, parts: Sequence[tuple[str, Sequence[int]]]) -> bool:
        if not parts:
            return False
        with self._rmw() as s:
            q = select(JobRow).where(
                JobRow.id == job_id, JobRow.attempt == attempt, JobRow.state == JobState.RUNNING.value
            )
            row = s.scalars(q if self.is_sqlite else q.with_for_update()).first()
            if row is None:
                return False
            delivered = row.node is not None and f",{row.node}," in (row.delivered_nodes or ",")
            row.node, row.gpu_indices = parts[0][0], list(parts[0][1])
            row.parts = [[n, list(g)] for n, g in parts]
            row.node_list = _name_list(n for n, _ in parts)
            if delivered:
                row.delivered_nodes = f",{parts[0][0]},"
            where = "; ".join(f"node {n}, GPUs {','.join(map(str, g)) or 'none'}" for n, g in parts)
            s.add(JobEventRow(job_id=job_id, at=datetime.now(UTC), kind="placed", message=f"by its cluster: {where}"))
            return True

    def set_job_phase(self, job_id: int, attempt: int, phase: str) -> bool:
        with self._tx() as s:
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.attempt == attempt, JobRow.state == JobState.RUNNING.value)
                .values(phase=phase[:64])
            )
            return bool(affected_rows(res))

    def update_staging(
        self,
        job_id: int,
        expect: tuple[str, str | None],
        state: str,
        node: str | None,
        progress: str,
        nodes: Sequence[str] = (),
    ) -> bool:
        before, before_node = expect
        node_is = JobRow.stage_node.is_(None) if before_node is None else JobRow.stage_node == before_node
        values: dict[str, Any] = {"stage_state": state, "stage_node": node, "stage_progress": progress[:255]}
        if node is None or nodes:  # where it is staged changes: from none (reset) or onto these nodes
            values.update(stage_nodes=_name_list(nodes) if nodes else None, stage_done="")
        with self._tx() as s:
            res = s.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.state == JobState.PENDING.value,
                    JobRow.stage_state == before,
                    node_is,
                )
                .values(**values)
            )
            return bool(affected_rows(res))

    def finish_staging_on(self, job_id: int, node: str) -> str:
        with self._rmw() as s:
            r = s.scalars(select(JobRow).where(JobRow.id == job_id).with_for_update()).first()
            if r is None or r.state != JobState.PENDING.value or r.stage_state != IN_STAGING:
                return ""
            nodes, done = _staging_of(r)
            if node not in nodes or node in done:
                return ""
            r.stage_done = _name_list((*done, node))
            if set(nodes) <= {*done, node}:
                r.stage_state = IN_STAGED
            return r.stage_state

    def list_staging(self, node: str) -> list[Job]:
        with self._tx() as s:
            return _staging(s.connection(), node)

    def list_stage_outs(self, node: str) -> list[Job]:
        with self._tx() as s:
            return _stage_outs(s.connection(), node)

    def read_node_work(self, node: str) -> NodeWork:
        """list_node_jobs, list_staging and list_stage_outs in one transaction: an agent's sync reads all three
        (each transaction is a pool checkout and, on PostgreSQL, a BEGIN and a COMMIT, each a round trip)."""
        with self._tx() as s:
            conn = s.connection()
            return NodeWork(_node_jobs(conn, node), _staging(conn, node), _stage_outs(conn, node))

    def set_stage_out(self, job_id: int, state: str, message: str) -> bool:
        with self._tx() as s:
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.stage_out_state.in_([OUT_PENDING, OUT_RUNNING]))
                .values(stage_out_state=state, stage_out_message=message[:2000])
            )
            return bool(affected_rows(res))

    def set_node_images(self, name: str, images: Sequence[str]) -> bool:
        with self._tx() as s:
            res = s.execute(update(NodeRow).where(NodeRow.name == name).values(images=list(images)))
            return bool(affected_rows(res))

    def record_part_exit(self, job_id: int, node: str, exit_code: int) -> dict[str, int]:
        """Keep the exit code of a gang's part; returns every part's exit code so far."""
        with self._rmw() as s:
            row = s.get(JobRow, job_id, with_for_update=not self.is_sqlite)
            if row is None:
                return {}
            exits = dict(row.part_exits or {})
            exits[node] = exit_code
            row.part_exits = exits
            return exits

    def request_cancel(self, job_id: int, now: datetime) -> Job | None:
        with self._rmw() as s:
            row = s.get(JobRow, job_id, with_for_update=not self.is_sqlite)
            if row is None:
                return None
            if not can_transition(JobState(row.state), JobState.CANCELLED):  # terminal: returned unchanged
                return _job(row)
            if row.state == JobState.PENDING.value:
                row.state, row.finished_at, row.reason = JobState.CANCELLED.value, now, "cancelled before start"
                s.add(JobEventRow(job_id=job_id, at=now, kind="cancelled", message="cancelled while pending"))
            elif row.state == JobState.RUNNING.value and not row.cancel_requested:
                row.cancel_requested = True
                s.add(JobEventRow(job_id=job_id, at=now, kind="cancel_requested", message=""))
            s.flush()
            return _job(row)

    def finish_job(self, job_id: int, state: JobState, exit_code: int | None, reason: str, now: datetime) -> bool:
        return self.finish_jobs([(job_id, state, exit_code, reason)], now)[0]

    def finish_jobs(
        self,
        finishes: Sequence[tuple[int, JobState, int | None, str]],
        now: datetime,
        runs: Mapping[int, int] | None = None,
    ) -> list[bool]:
        """One UPDATE run per target state (and guard) for all its jobs, each row guarded by its state (a job in
        `runs`: RUNNING at that attempt), and one INSERT of their events: an agent's report of several exits is one
        transaction."""
        for _, state, _, _ in finishes:
            if not state.terminal:
                raise ValueError(f"finish_job needs a terminal state, not {state}")
        first: dict[int, tuple[JobState, int | None, str]] = {}
        for job_id, state, code, reason in finishes:
            first.setdefault(job_id, (state, code, reason))
        if not first:
            return []
        jobs = _JOBS.c
        runs = runs or {}
        done: set[int] = set()
        with self._tx() as s:
            targets = sorted({st for st, _, _ in first.values()}, key=lambda st: st.value)
            for target, of_run in [(t, r) for t in targets for r in (False, True)]:
                group = {i: f for i, f in first.items() if f[0] is target and (i in runs) is of_run}
                if not group:
                    continue
                guard = (
                    [jobs.state == JobState.RUNNING.value, jobs.attempt == bindparam("b_attempt")]
                    if of_run
                    else [or_(*(jobs.state == st for st in _sources(target)))]
                )
                stmt = (
                    update(_JOBS)
                    .where(jobs.id == bindparam("b_id"), *guard)
                    .values(
                        state=target.value, exit_code=bindparam("b_code"), reason=bindparam("b_reason"), finished_at=now
                    )
                )
                params = [
                    {"b_id": i, "b_code": code, "b_reason": reason, **({"b_attempt": runs[i]} if of_run else {})}
                    for i, (_, code, reason) in group.items()
                ]
                res = s.connection().execute(stmt, params)
                if affected_rows(res) == len(group):
                    done |= set(group)
                else:  # some had moved already: the ones this call moved carry its state and its time
                    moved = s.execute(
                        select(JobRow.id).where(
                            JobRow.id.in_(list(group)), JobRow.state == target.value, JobRow.finished_at == now
                        )
                    )
                    done |= set(moved.scalars().all())
            events = [
                {
                    "job_id": i,
                    "at": now,
                    "kind": state.value.lower(),
                    "message": f"exit code {code}" if code is not None else reason,
                }
                for i, (state, code, reason) in first.items()
                if i in done
            ]
            if events:
                s.connection().execute(insert(_JOB_EVENTS), events)
        seen: set[int] = set()
        out = []
        for job_id, _, _, _ in finishes:  # a job named twice: only its first entry can have moved it
            out.append(job_id in done and job_id not in seen)
            seen.add(job_id)
        return out

    def requeue_job(
        self,
        job_id: int,
        reason: str,
        now: datetime,
        not_before: datetime | None = None,
        failure: bool = False,
        preempted: bool = False,
    ) -> bool:
        """RUNNING -> PENDING. Its creation time is kept, so it keeps its place in the queue; the GPU-seconds
        it ran are added to attained_gpu_s; `failure` / `preempted` count the cause."""
        with self._rmw() as s:
            row = s.get(JobRow, job_id, with_for_update=not self.is_sqlite)
            if row is None or row.state not in _sources(JobState.PENDING):
                return False
            ran_s = (now - (_utc(row.started_at) or now)).total_seconds() if row.started_at else 0.0
            row.attained_gpu_s = (row.attained_gpu_s or 0.0) + max(ran_s, 0.0) * row.gpus * row.gpu_milli / 1000
            row.state, row.node, row.gpu_indices, row.started_at = JobState.PENDING.value, None, [], None
            row.parts, row.node_list, row.delivered_nodes, row.part_exits = [], "", "", {}
            row.delivered, row.cancel_requested, row.preempt_requested = False, False, False
            row.preempted_for = None
            row.reason, row.not_before = reason, not_before
            row.failures = (row.failures or 0) + (1 if failure else 0)
            row.preemptions = (row.preemptions or 0) + (1 if preempted else 0)
            s.add(JobEventRow(job_id=job_id, at=now, kind="preempted" if preempted else "requeued", message=reason))
            return True

    def request_preempt(self, job_id: int, reason: str, now: datetime, for_job_id: int | None = None) -> bool:
        """Ask the agent to stop a RUNNING job so that it requeues (it keeps its GPUs until it exits)."""
        with self._tx() as s:
            res = s.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.state == JobState.RUNNING.value,
                    JobRow.preempt_requested.is_(False),
                    JobRow.cancel_requested.is_(False),
                )
                .values(preempt_requested=True, preempted_for=for_job_id, reason=reason)
            )
            if affected_rows(res):
                s.add(JobEventRow(job_id=job_id, at=now, kind="preempting", message=reason))
            return bool(affected_rows(res))

    def add_event(self, job_id: int, kind: str, message: str, now: datetime) -> None:
        with self._tx() as s:
            s.add(JobEventRow(job_id=job_id, at=now, kind=kind, message=message))

    def list_events(self, job_id: int) -> list[JobEvent]:
        with self._tx() as s:
            rows = s.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)).all()
            return [JobEvent(job_id=r.job_id, at=_utc(r.at) or r.at, kind=r.kind, message=r.message) for r in rows]


_IN_CHUNK = 500  # ids per IN (...) list
# The tables under the ORM classes, for Core statements run many times with one call (executemany)
_JOBS = cast(Table, JobRow.__table__)
_JOB_EVENTS = cast(Table, JobEventRow.__table__)
# what a Job is read from: every column but the telemetry summary (reports read it alone), as plain rows; building
# ORM instances for a read (identity map, instance state) cost as much again as the conversion to Job itself
_JOB_COLUMNS = tuple(c for c in _JOBS.c if c.name != "gpu_summary")


_JobColumns = namedtuple("_JobColumns", [c.name for c in _JOB_COLUMNS])  # type: ignore[misc]  # fast attributes


_SELECT_JOBS = select(*_JOB_COLUMNS)  # built once: building a select of ~60 columns costs ~0.1 ms
# add_job_rows: the new jobs' rows back in the order given (SQLite and psycopg both), and their events
_INSERT_JOBS = insert(_JOBS).returning(*_JOB_COLUMNS, sort_by_parameter_order=True)
_INSERT_JOB_PLAIN = insert(_JOBS)
_INSERT_EVENTS = insert(_JOB_EVENTS)
_SET_ARRAY_ID = update(_JOBS).where(_JOBS.c.id == bindparam("b_id")).values(array_id=bindparam("b_array"))


def _listed(column: Any, key: str) -> Any:
    """`column` (",n1,n2,") names the node bound as `key`: LIKE on a pattern from _listed_pattern."""
    return column.like(bindparam(key), escape="/")


def _listed_pattern(node: str) -> str:
    """The LIKE pattern that finds `node` in a name list, its wildcards escaped (a node may be named a_b)."""
    return "%," + node.replace("/", "//").replace("%", "/%").replace("_", "/_") + ",%"


# an agent's sync runs these each time: built once, so their cache keys are too (a key of a statement built anew
# walks its ~60 columns every time)
_RUNNING = JobRow.state == JobState.RUNNING.value
_NODE_RUNNING = _SELECT_JOBS.where(_RUNNING, JobRow.node == bindparam("node"))
_GANGS_RUNNING_ON = _SELECT_JOBS.where(_RUNNING, JobRow.nodes > 1, _listed(JobRow.node_list, "node_pat"))
_STAGE_OUTS = _SELECT_JOBS.where(
    JobRow.stage_out_state.in_([OUT_PENDING, OUT_RUNNING]), JobRow.node == bindparam("node")
)
_STAGING = _SELECT_JOBS.where(
    JobRow.state == JobState.PENDING.value,
    JobRow.stage_state == IN_STAGING,
    (JobRow.stage_node == bindparam("node")) | _listed(JobRow.stage_nodes, "node_pat"),
)


def _jobs_of(rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Jobs from rows of _SELECT_JOBS, through a namedtuple: a Row's attributes cost ~10x a namedtuple's."""
    return [_job(_JobColumns._make(r)) for r in rows]


def _sources(dst: JobState) -> list[str]:
    """Stored states a job may move to `dst` from (core/states.py's table): every job-state guard below uses it."""
    return [src.value for src in compute_sources(dst)]


def open_store(url: str) -> SqlStore:
    """Open (and migrate) the store at `url`; a bare path or sqlite URL makes its folder."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    store = SqlStore(url)
    try:
        store.migrate()  # raises SchemaIncompatibleError on a schema a newer Corral contracted past this code
    except BaseException:
        store.close()
        raise
    return store


def _gpu(g: GpuRow) -> GpuInfo:
    return GpuInfo(
        index=g.index,
        uuid=g.uuid,
        model=g.model,
        memory_mib=g.memory_mib,
        pci_bus_id=g.pci_bus_id,
        numa_node=g.numa_node,
        nvlink_peers=tuple(g.nvlink_peers or ()),
        pcie_switch=g.pcie_switch,
        ecc_enabled=g.ecc_enabled,
        healthy=g.healthy and not g.disabled,
    )


_NODE_COLUMNS = (
    NodeRow.name,
    NodeRow.hostname,
    NodeRow.backend,
    NodeRow.cpu_milli,
    NodeRow.memory_mib,
    NodeRow.state,
    NodeRow.registered_at,
    NodeRow.last_heartbeat_at,
    NodeRow.labels,
    NodeRow.cordoned,
    NodeRow.address,
    NodeRow.isolation,
    NodeRow.runtimes,
    NodeRow.images,
)
_GPU_COLUMNS = (
    GpuRow.node_name,
    GpuRow.index,
    GpuRow.uuid,
    GpuRow.model,
    GpuRow.memory_mib,
    GpuRow.pci_bus_id,
    GpuRow.numa_node,
    GpuRow.nvlink_peers,
    GpuRow.pcie_switch,
    GpuRow.ecc_enabled,
    GpuRow.healthy,
    GpuRow.health_reason,
    GpuRow.disabled,
)

# the scheduler's assign runs these each pass that starts a job: built once (building the UPDATE's ~25 values and
# the IN lists cost more than running them)
_NAMES: Any = bindparam("names", expanding=True)
_JOBS_BY_ID = _SELECT_JOBS.where(JobRow.id.in_(bindparam("ids", expanding=True)))
_JOBS_BY_ID_ORDERED = _JOBS_BY_ID.order_by(JobRow.id)
_IDS_AND_VERSIONS = select(JobRow.id, JobRow.row_version, JobRow.created_at)
# list_jobs keeps at most this many jobs between pages (past this it starts again), each with at most this many
# bytes of command and environment (a job may carry 512 KiB: those are read each time): ~60 MB at worst
_MAX_PAGED = 10_000
_MAX_PAGED_JOB_BYTES = 4096


def _rows_by_id(conn: Connection, ids: Sequence[int]) -> list[tuple[Any, Job]]:
    """(row, job) of each of these jobs (_SELECT_JOBS's columns), read in chunks of _IN_CHUNK ids."""
    out: list[tuple[Any, Job]] = []
    for at in range(0, len(ids), _IN_CHUNK):
        rows = conn.execute(_JOBS_BY_ID, {"ids": ids[at : at + _IN_CHUNK]}).all()
        out += zip(rows, _jobs_of(rows), strict=True)
    return out


def _kept_size(job: Job) -> int:
    """The bytes of a job's command and environment, what makes one job much larger than another."""
    spec = job.spec
    return sum(map(len, spec.command)) + sum(len(k) + len(v) for k, v in spec.env.items())


_DELIVERY_OF = select(JobRow.id, JobRow.delivered, JobRow.delivered_nodes).where(
    JobRow.id.in_(bindparam("ids", expanding=True)), _RUNNING
)
_DELIVERY_OF_LOCKED = _DELIVERY_OF.with_for_update()
_SET_DELIVERED = (
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("b_id"), _JOBS.c.state == JobState.RUNNING.value)
    .values(delivered=True, delivered_nodes=bindparam("b_nodes"))
)
# each pass reads the pending and the running jobs' versions (JobCache)
_IDS_VERSIONS = (
    select(JobRow.id, JobRow.row_version)
    .where(JobRow.state.in_(bindparam("states", expanding=True)))
    .order_by(JobRow.id)
)
_LOCK_NODES_SQLITE = update(NodeRow).where(NodeRow.name.in_(_NAMES)).values(cordoned=NodeRow.cordoned)
_LOCK_NODES = select(NodeRow.name).where(NodeRow.name.in_(_NAMES)).order_by(NodeRow.name).with_for_update()
_SUBMIT_COUNTERS = select(ChangeCounterRow.name, ChangeCounterRow.version).where(
    ChangeCounterRow.name.in_((NODE_SHAPES, SUBMIT_RULES))
)
_MAX_KEPT_TENANTS = 4096  # read_submit_lists keeps each tenant's queues and quotas; past this many it starts again
_ALL_NODES = select(*_NODE_COLUMNS).order_by(NodeRow.name)  # list_nodes: each pass, each GET /nodes
_ALL_GPUS = select(*_GPU_COLUMNS).order_by(GpuRow.node_name, GpuRow.index)
_NODES_COUNTER = select(ChangeCounterRow.version).where(ChangeCounterRow.name == NODES)
_NODES_LIVE = select(NodeRow.name, NodeRow.state, NodeRow.last_heartbeat_at).order_by(NodeRow.name)
_NODES_NAMED = select(*_NODE_COLUMNS).where(NodeRow.name.in_(_NAMES))
_GPUS_NAMED = select(*_GPU_COLUMNS).where(GpuRow.node_name.in_(_NAMES)).order_by(GpuRow.node_name, GpuRow.index)
_USE_COLUMNS = (
    JobRow.id,
    JobRow.node,
    JobRow.gpu_indices,
    JobRow.parts,
    JobRow.gpu_milli,
    JobRow.cpu_milli,
    JobRow.memory_mib,
)
_USE_ON_NODES = select(*_USE_COLUMNS).where(_RUNNING, JobRow.node.in_(_NAMES))
_USE_OF_GANGS = select(*_USE_COLUMNS).where(_RUNNING, JobRow.nodes > 1)
_ASSIGN = (
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("b_id"), or_(*(_JOBS.c.state == st for st in _sources(JobState.RUNNING))))
    .values(
        state=JobState.RUNNING.value,
        node=bindparam("b_node"),
        gpu_indices=bindparam("b_gpus", type_=_JOBS.c.gpu_indices.type),
        parts=bindparam("b_parts", type_=_JOBS.c.parts.type),
        node_list=bindparam("b_node_list"),
        delivered_nodes="",
        part_exits={},
        image_digest="",
        phase="",
        started_at=bindparam("b_now", type_=_JOBS.c.started_at.type),
        delivered=False,
        reason="",
        attempt=_JOBS.c.attempt + 1,
        not_before=None,
        # its staged input is used by this attempt; a later one (after a requeue) stages it again
        stage_state="",
        stage_node=None,
        stage_progress="",
        stage_nodes=None,
        stage_done="",
        # this attempt's output is still to ship (a gang's earlier attempt may have shipped its own)
        stage_out_state=case((_JOBS.c.stage_out_state == "", ""), else_=OUT_PENDING),
        stage_out_message="",
    )
)


def _gpu_of_columns(g: Any) -> tuple[GpuInfo, GpuStatus]:
    """A row of _GPU_COLUMNS as `_gpu` and `_node` make it from a GpuRow."""
    _, index, uuid, model, memory_mib, pci, numa, peers, switch, ecc, healthy, reason, disabled = g
    info = GpuInfo(
        index=index,
        uuid=uuid,
        model=model,
        memory_mib=memory_mib,
        pci_bus_id=pci,
        numa_node=numa,
        nvlink_peers=tuple(peers or ()),
        pcie_switch=switch,
        ecc_enabled=ecc,
        healthy=healthy and not disabled,
    )
    return info, GpuStatus(index, healthy, reason or "", disabled)


def _with_live(kept: Sequence[Node], live: Sequence[Any]) -> list[Node] | None:
    """The kept nodes with the state and last heartbeat of `live` (name, state, heartbeat rows, by name); None when
    the names differ (a node came or went after the counter was read: read everything)."""
    if len(live) != len(kept):
        return None
    out: list[Node] = []
    for node, (name, state, heartbeat) in zip(kept, live, strict=True):
        if name != node.name:
            return None
        heartbeat = _utc(heartbeat) or heartbeat
        if state != node.state or heartbeat != node.last_heartbeat_at:
            node = replace(node, state=state, last_heartbeat_at=heartbeat)
        out.append(node)
    return out


def _node_of_columns(r: Any, gpus: Sequence[tuple[GpuInfo, GpuStatus]]) -> Node:
    """A row of _NODE_COLUMNS as `_node` makes it from a NodeRow."""
    (
        name,
        hostname,
        backend,
        cpu_milli,
        memory_mib,
        state,
        registered,
        heartbeat,
        labels,
        cordoned,
        address,
        iso,
        rt,
        im,
    ) = r
    return Node(
        name=name,
        hostname=hostname,
        backend=backend,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        state=state,
        registered_at=_utc(registered) or registered,
        last_heartbeat_at=_utc(heartbeat) or heartbeat,
        gpus=tuple(g for g, _ in gpus),
        labels=dict(labels or {}),
        cordoned=bool(cordoned),
        address=address or hostname,
        gpu_status=tuple(st for _, st in gpus),
        isolation=iso or "",
        runtimes=tuple(rt or ("process",)),
        images=tuple(im or ()),
    )


def _node_jobs(conn: Connection, node: str) -> list[Job]:
    """list_node_jobs' read, on a connection in a transaction."""
    # two index reads, not one OR (which scans every running job): the node's own by (node, state), and the
    # running gangs (a partial index), whose later nodes are only in node_list
    rows = list(conn.execute(_NODE_RUNNING, {"node": node}).all())
    gangs = conn.execute(_GANGS_RUNNING_ON, {"node_pat": _listed_pattern(node)}).all()
    # LIKE only narrows: SQLite's ignores ASCII case (a node N3 would get n3's gangs, their secrets included, and
    # requeue them when lost or drained), so each name is compared whole here; the gangs headed here were read
    # above (compared here, not in SQL, where `node != :node` drops a NULL head)
    rows += [r for r in gangs if r.node != node and node in _names_in(r.node_list)]
    return sorted(_jobs_of(rows), key=lambda j: j.id)


def _staging(conn: Connection, node: str) -> list[Job]:
    """list_staging's read, on a connection in a transaction."""
    rows = conn.execute(_STAGING, {"node": node, "node_pat": _listed_pattern(node)}).all()
    jobs = sorted(_jobs_of(rows), key=lambda j: j.id)
    return [j for j in jobs if node in j.stage_nodes and node not in j.stage_done]


def _stage_outs(conn: Connection, node: str) -> list[Job]:
    """list_stage_outs' read, on a connection in a transaction."""
    # by (stage_out_state, node) alone: with the state in the query too, or asked for id order, SQLite reads the
    # node's whole history through another index (it cannot tell that almost no row has output to ship); the few
    # rows are sorted and their states checked here
    jobs = sorted(_jobs_of(conn.execute(_STAGE_OUTS, {"node": node}).all()), key=lambda j: j.id)
    # a gang's output ships from its first node (rank 0) once that part has ended: its node drops the stage dir of
    # an ended part unless asked for its output then, while the others may still run
    return [
        j
        for j in jobs
        if j.state.terminal or (j.state is JobState.RUNNING and len(j.placed_parts) > 1 and node in j.part_exits)
    ]


def _node(r: NodeRow, gpus: Sequence[GpuRow]) -> Node:
    return Node(
        name=r.name,
        hostname=r.hostname,
        backend=r.backend,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        state=r.state,
        registered_at=_utc(r.registered_at) or r.registered_at,
        last_heartbeat_at=_utc(r.last_heartbeat_at) or r.last_heartbeat_at,
        gpus=tuple(_gpu(g) for g in gpus),
        labels=dict(r.labels or {}),
        cordoned=bool(r.cordoned),
        address=r.address or r.hostname,
        gpu_status=tuple(GpuStatus(g.index, g.healthy, g.health_reason or "", g.disabled) for g in gpus),
        isolation=r.isolation or "",
        runtimes=tuple(r.runtimes or ("process",)),
        images=tuple(r.images or ()),
    )


def insert_job(s: Session, spec: JobSpec, now: datetime) -> Any:
    """Add an accepted job as PENDING (with its `submitted` event) inside the caller's transaction."""
    return add_job_rows(s, [spec], now)[0]


def add_job_rows(s: Session, specs: Sequence[JobSpec], now: datetime) -> list[Any]:
    """Add accepted jobs as PENDING, each with its `submitted` event, in the caller's transaction: one INSERT of the
    jobs that returns their rows (as _JobColumns, in the order of `specs`) and one of the events. Core statements
    built once: the ORM's unit of work (objects, flush, identity map) was most of a submission's store time."""
    if not specs:  # (an empty parameter list would run the INSERT once, with the defaults alone)
        return []
    conn = s.connection()
    values = [_new_job_values(spec, now) for spec in specs]
    if conn.dialect.insert_returning and conn.dialect.use_insertmanyvalues:
        rows: list[Any] = [_JobColumns._make(r) for r in conn.execute(_INSERT_JOBS, values).all()]
    else:  # SQLite before 3.35 has no RETURNING: one INSERT per job, then the rows by id (ids grow in order)
        ids = [cast(Any, conn.execute(_INSERT_JOB_PLAIN, v).inserted_primary_key)[0] for v in values]
        rows = [_JobColumns._make(r) for r in conn.execute(_JOBS_BY_ID_ORDERED, {"ids": ids}).all()]
    events = [
        {
            "job_id": row.id,
            "at": now,
            "kind": "submitted",
            "message": f"by schedule {spec.schedule_id}"
            if spec.schedule_id
            else (f"by service {spec.service_id} (revision {spec.service_revision})" if spec.service_id else ""),
        }
        for row, spec in zip(rows, specs, strict=True)
    ]
    conn.execute(_INSERT_EVENTS, events)
    return rows


def _new_job_values(spec: JobSpec, now: datetime) -> dict[str, Any]:
    """A new job's columns; the table's defaults fill the rest."""
    return dict(
        name=spec.name,
        user_id=spec.user_id,
        command=list(spec.command),
        env=dict(spec.env),
        workdir=spec.workdir,
        gpus=spec.gpus,
        gpu_milli=spec.gpu_milli,
        gpu_models=list(spec.gpu_models),
        min_gpu_memory_mib=spec.min_gpu_memory_mib,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        priority=spec.priority,
        state=JobState.PENDING.value,
        created_at=now,
        gpu_indices=[],
        reason="",
        cancel_requested=False,
        delivered=False,
        attempt=0,
        tenant_id=spec.tenant_id,
        queue=spec.queue,
        time_limit_s=spec.time_limit_s,
        max_retries=spec.max_retries,
        gpu_summary={},
        port=spec.port,
        nodes=spec.nodes,
        schedule_id=spec.schedule_id,
        service_id=spec.service_id,
        service_revision=spec.service_revision,
        secret_env=dict(spec.secret_env),
        array_id=spec.array_id,
        array_index=spec.array_index,
        array_limit=spec.array_limit,
        container=container_to_dict(spec.container) if spec.container is not None else None,
        tolerations=list(spec.tolerations) or None,
        pool=spec.pool or None,
        stage_in=[str(i) for i in spec.stage_in] or None,
        stage_out=[str(i) for i in spec.stage_out] or None,
        stage_secret=spec.stage_secret or None,
        stage_out_state=OUT_PENDING if spec.stage_out else "",
    )


def insert_jobs(s: Session, specs: Sequence[JobSpec], now: datetime, max_active: int | None = None) -> list[Any]:
    """Add several accepted jobs of one tenant in the caller's transaction; the tasks of each array get its first
    task's id as their `array_id` (core.arrays.compute_array_group). With `max_active`, the tenant's pending and
    running jobs are counted first, under a lock on its row, so that concurrent submissions cannot pass the limit
    together (core.tenancy.check_active_limit). Every tenant the specs name is checked (in id order, the order
    its row locks are taken in), not only the first one's."""
    adding = count_by_tenant(specs) if max_active is not None else {}
    for tenant_id, n in sorted(adding.items()):
        s.execute(select(TenantRow.id).where(TenantRow.id == tenant_id).with_for_update())
        active = s.scalar(
            select(func.count())
            .select_from(JobRow)
            .where(JobRow.tenant_id == tenant_id, JobRow.state.in_([JobState.PENDING.value, JobState.RUNNING.value]))
        )
        check_active_limit(active or 0, n, max_active)
    rows = add_job_rows(s, specs, now)
    groups = [compute_array_group(spec.array_id, spec.array_index) for spec in specs]
    if any(g is not None for g in groups):  # the keys written above become the arrays' ids
        array_ids = assign_array_ids(groups, [r.id for r in rows])
        changed = [{"b_id": r.id, "b_array": a} for r, a in zip(rows, array_ids, strict=True) if r.array_id != a]
        if changed:
            s.connection().execute(_SET_ARRAY_ID, changed)
        rows = [r._replace(array_id=a) for r, a in zip(rows, array_ids, strict=True)]
    return rows


def _where_job(
    q: Select[Any],
    states: Sequence[JobState] | None,
    tenant_id: int | None,
    user_id: int | None,
    name_contains: str | None,
    node: str | None = None,
    array_id: int | None = None,
) -> Select[Any]:
    """The filters list_jobs and count_jobs share (X-Total-Count counts what the list pages through)."""
    if node is not None:
        q = q.where(JobRow.node == node)
    if array_id is not None:
        q = q.where(JobRow.array_id == array_id)
    if states is not None:
        q = q.where(JobRow.state.in_([st.value for st in states]))
    if tenant_id is not None:
        q = q.where(JobRow.tenant_id == tenant_id)
    if user_id is not None:
        q = q.where(JobRow.user_id == user_id)
    if name_contains:
        q = q.where(JobRow.name.icontains(name_contains, autoescape=True))
    return q


class _PageFilter(NamedTuple):
    """What list_jobs narrows by, besides the states."""

    tenant_id: int | None
    user_id: int | None
    name_contains: str | None
    node: str | None
    array_id: int | None
    schedule_id: int | None
    service_id: int | None
    before_id: int | None
    after_id: int | None


def _page_query(
    q: Select[Any], states: Sequence[JobState] | None, f: _PageFilter, newest_first: bool, limit: int | None
) -> Select[Any]:
    """`q` (columns of jobs) narrowed by the states and `f`, in id order, at most `limit`. With several states and
    a limit, a union of one ordered, limited range per state (each the (state, id) index's, or (tenant, state, id)'s),
    merged: the same rows as one `state IN (...)` query, which SQLite answered by sorting every row of those states.
    (PostgreSQL, guessing a state's rows spread evenly over the ids, walked the primary key past every finished job
    to find the waiting ones, the newest: ix_jobs_active_id, migration 0033, is what it walks now.)"""

    def narrowed(q: Select[Any], states: Sequence[JobState] | None) -> Select[Any]:
        q = _where_job(q, states, f.tenant_id, f.user_id, f.name_contains, f.node, f.array_id)
        if f.schedule_id is not None:
            q = q.where(JobRow.schedule_id == f.schedule_id)
        if f.service_id is not None:
            q = q.where(JobRow.service_id == f.service_id)
        if f.before_id is not None:
            q = q.where(JobRow.id < f.before_id)
        if f.after_id is not None:
            q = q.where(JobRow.id > f.after_id)
        return q.order_by(JobRow.id.desc() if newest_first else JobRow.id).limit(limit)

    if limit is None or states is None or len(set(states)) < 2:
        return narrowed(q, states)
    ranges = union_all(*(select(narrowed(q, [st]).subquery()) for st in dict.fromkeys(states))).subquery()
    return select(ranges).order_by(ranges.c.id.desc() if newest_first else ranges.c.id).limit(limit)


def _job(r: Any) -> Job:  # a JobRow, or a _JobColumns of _SELECT_JOBS
    stage_nodes, stage_done = _staging_of(r)
    spec = JobSpec(
        command=tuple(r.command),
        name=r.name,
        env=dict(r.env or {}),
        workdir=r.workdir,
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        gpu_models=tuple(r.gpu_models or ()),
        min_gpu_memory_mib=r.min_gpu_memory_mib,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        priority=r.priority,
        user_id=r.user_id,
        tenant_id=r.tenant_id,
        queue=r.queue or "default",
        time_limit_s=r.time_limit_s,
        max_retries=r.max_retries,
        port=r.port,
        nodes=r.nodes or 1,
        schedule_id=r.schedule_id,
        secret_env=dict(r.secret_env or {}),
        array_id=r.array_id,
        array_index=r.array_index,
        array_limit=r.array_limit,
        container=container_from_dict(r.container),
        service_id=r.service_id,
        service_revision=r.service_revision,
        tolerations=tuple(r.tolerations or ()),
        pool=r.pool or "",
        stage_in=tuple(parse_stage_in(t) for t in r.stage_in or ()),
        stage_out=tuple(parse_stage_out(t) for t in r.stage_out or ()),
        stage_secret=r.stage_secret or "",
        pinned_node="|".join(stage_nodes) if r.stage_state == IN_STAGED and r.state == JobState.PENDING.value else "",
    )
    return Job(
        id=r.id,
        spec=spec,
        state=JobState(r.state),
        created_at=_utc(r.created_at) or r.created_at,
        node=r.node,
        gpu_indices=tuple(r.gpu_indices or ()),
        exit_code=r.exit_code,
        reason=r.reason or "",
        started_at=_utc(r.started_at),
        finished_at=_utc(r.finished_at),
        cancel_requested=r.cancel_requested,
        delivered=r.delivered,
        attempt=r.attempt,
        not_before=_utc(r.not_before),
        failures=r.failures or 0,
        preempt_requested=bool(r.preempt_requested),
        preempted_for=r.preempted_for,
        preemptions=r.preemptions or 0,
        attained_gpu_s=r.attained_gpu_s or 0.0,
        parts=compute_placed_parts(r.node, r.gpu_indices or (), r.parts or []),
        delivered_to=frozenset(_names_in(r.delivered_nodes)),
        part_exits={str(k): int(v) for k, v in (r.part_exits or {}).items()},
        image_digest=r.image_digest or "",
        phase=r.phase or "",
        stage_state=r.stage_state or "",
        stage_node=r.stage_node,
        stage_progress=r.stage_progress or "",
        stage_nodes=stage_nodes,
        stage_done=stage_done,
        stage_out_state=r.stage_out_state or "",
        stage_out_message=r.stage_out_message or "",
    )


def _name_list(names: Iterable[str]) -> str:
    """Node names as one column that finds each of them with LIKE: ",n1,n2," (node_list, stage_nodes, stage_done)."""
    return "," + ",".join(names) + ","


def _names_in(column: str | None) -> tuple[str, ...]:
    """The names a _name_list column holds."""
    return tuple(x for x in (column or "").split(",") if x)


def _staging_of(r: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nodes a job's input is staged on and those that have it in: its stage_nodes and stage_done, or its
    stage_node alone and none done (a row staged before 0027, or staged again by a replica of that release, which
    writes stage_node only: its lists are then stale)."""
    listed = _names_in(r.stage_nodes)
    if listed and listed[0] == r.stage_node:
        return listed, _names_in(r.stage_done)
    return ((r.stage_node,) if r.stage_node else ()), ()


if TYPE_CHECKING:  # mypy checks here that SqlStore satisfies every role (tests/contract checks it at run time)
    _SQL_STORE_IS_A_STATE_STORE: type[StateStore] = SqlStore
    _SQL_STORE_IS_A_SCHEDULING_STORE: type[SchedulingStore] = SqlStore
