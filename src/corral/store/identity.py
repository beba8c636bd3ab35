"""Node identities in SQL: join tokens (hashed, expiring, limited uses, revocable) and the certificates the
cluster CA issued to nodes (by serial and fingerprint, revocable). A mixin of SqlStore."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from corral.store.tables import JoinTokenRow, NodeCertRow, NodeRow
from corral.store.tenancy import affected_rows, utc


@dataclass(frozen=True, slots=True)
class JoinTokenRecord:
    id: int
    description: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    max_uses: int
    uses: int
    revoked_at: datetime | None

    def usable_at(self, now: datetime) -> bool:
        return self.revoked_at is None and self.uses < self.max_uses and now < self.expires_at


@dataclass(frozen=True, slots=True)
class NodeCertRecord:
    serial: str
    fingerprint: str
    node: str
    issued_at: datetime
    not_after: datetime
    join_token_id: int | None
    revoked_at: datetime | None

    def live_at(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.not_after


def _join(r: JoinTokenRow) -> JoinTokenRecord:
    return JoinTokenRecord(
        id=r.id,
        description=r.description,
        created_by=r.created_by,
        created_at=utc(r.created_at) or r.created_at,
        expires_at=utc(r.expires_at) or r.expires_at,
        max_uses=r.max_uses,
        uses=r.uses,
        revoked_at=utc(r.revoked_at),
    )


def _cert(r: NodeCertRow) -> NodeCertRecord:
    return NodeCertRecord(
        serial=r.serial,
        fingerprint=r.fingerprint,
        node=r.node,
        issued_at=utc(r.issued_at) or r.issued_at,
        not_after=utc(r.not_after) or r.not_after,
        join_token_id=r.join_token_id,
        revoked_at=utc(r.revoked_at),
    )


class NodeIdentityMethods:
    """Every method is one transaction (see corral.store.base for the contracts)."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def create_join_token(
        self, secret_hash: str, description: str, created_by: str, now: datetime, expires_at: datetime, max_uses: int
    ) -> JoinTokenRecord:
        """Store a join token by the hash of its secret. Not idempotent: each call adds a row."""
        with self._tx() as s:
            row = JoinTokenRow(
                secret_hash=secret_hash,
                description=description,
                created_by=created_by,
                created_at=now,
                expires_at=expires_at,
                max_uses=max_uses,
                uses=0,
            )
            s.add(row)
            s.flush()
            return _join(row)

    def list_join_tokens(self) -> list[JoinTokenRecord]:
        """Every join token, newest first (expired, used up and revoked ones included). Read-only."""
        with self._tx() as s:
            return [_join(r) for r in s.scalars(select(JoinTokenRow).order_by(JoinTokenRow.id.desc())).all()]

    def get_join_token(self, token_id: int) -> JoinTokenRecord | None:
        with self._tx() as s:
            row = s.get(JoinTokenRow, token_id)
            return _join(row) if row else None

    def revoke_join_token(self, token_id: int, now: datetime) -> bool:
        """Revoke an unrevoked token. False when unknown or already revoked."""
        with self._tx() as s:
            res = s.execute(
                update(JoinTokenRow)
                .where(JoinTokenRow.id == token_id, JoinTokenRow.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            return bool(affected_rows(res))

    def use_join_token(self, token_id: int, secret_hash: str, now: datetime) -> bool:
        """Spend one use of a token, compare-and-set: True only when id and hash match and the token is
        unrevoked, unexpired and has a use left (two joins racing for the last use: one wins)."""
        with self._tx() as s:
            res = s.execute(
                update(JoinTokenRow)
                .where(
                    JoinTokenRow.id == token_id,
                    JoinTokenRow.secret_hash == secret_hash,
                    JoinTokenRow.revoked_at.is_(None),
                    JoinTokenRow.expires_at > now,
                    JoinTokenRow.uses < JoinTokenRow.max_uses,
                )
                .values(uses=JoinTokenRow.uses + 1)
            )
            return bool(affected_rows(res))

    def record_node_cert(
        self,
        serial: str,
        fingerprint: str,
        node: str,
        issued_at: datetime,
        not_after: datetime,
        join_token_id: int | None,
    ) -> NodeCertRecord:
        with self._tx() as s:
            row = NodeCertRow(
                serial=serial,
                fingerprint=fingerprint,
                node=node,
                issued_at=issued_at,
                not_after=not_after,
                join_token_id=join_token_id,
            )
            s.add(row)
            s.flush()
            return _cert(row)

    def find_node_cert(self, fingerprint: str) -> NodeCertRecord | None:
        """The certificate with this fingerprint (revoked or not), or None. Read-only."""
        with self._tx() as s:
            row = s.scalars(select(NodeCertRow).where(NodeCertRow.fingerprint == fingerprint)).first()
            return _cert(row) if row else None

    def list_node_certs(self, node: str | None = None) -> list[NodeCertRecord]:
        with self._tx() as s:
            q = select(NodeCertRow).order_by(NodeCertRow.issued_at)
            if node is not None:
                q = q.where(NodeCertRow.node == node)
            return [_cert(r) for r in s.scalars(q).all()]

    def revoke_node_certs(self, node: str, now: datetime) -> list[str]:
        """Revoke every unrevoked certificate of `node`; returns their serials."""
        with self._tx() as s:
            serials = list(
                s.scalars(
                    select(NodeCertRow.serial).where(NodeCertRow.node == node, NodeCertRow.revoked_at.is_(None))
                ).all()
            )
            if serials:
                s.execute(update(NodeCertRow).where(NodeCertRow.serial.in_(serials)).values(revoked_at=now))
            return serials

    def mark_node_lost(self, node: str) -> bool:
        """Mark one node LOST now (its certificates were revoked). False when unknown."""
        with self._tx() as s:
            return bool(affected_rows(s.execute(update(NodeRow).where(NodeRow.name == node).values(state="LOST"))))
