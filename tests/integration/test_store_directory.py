"""The store's directory-login part on SQLite and PostgreSQL: group mappings and provisioned directory users."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.core.errors import ConflictError
from corral.core.tenancy import Role
from corral.store.sql import SqlStore

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_group_mappings_are_unique_per_group_and_go_with_their_tenant(store: SqlStore) -> None:
    vision = store.create_tenant("vision", NOW)
    nlp = store.create_tenant("nlp", NOW)
    m = store.create_group_mapping("vision", vision.id, "member", NOW)
    store.create_group_mapping("nlp-leads", nlp.id, "tenant-admin", NOW)
    assert [(x.group, x.tenant, x.role) for x in store.list_group_mappings()] == [
        ("vision", "vision", Role.MEMBER),
        ("nlp-leads", "nlp", Role.TENANT_ADMIN),
    ]
    with pytest.raises(ConflictError):
        store.create_group_mapping("vision", nlp.id, "admin", NOW)
    assert store.delete_group_mapping(m.id) and not store.delete_group_mapping(m.id)
    assert [x.group for x in store.list_group_mappings()] == ["nlp-leads"]


def test_a_directory_user_is_created_then_follows_its_groups(store: SqlStore) -> None:
    vision = store.create_tenant("vision", NOW)
    nlp = store.create_tenant("nlp", NOW)
    alice = store.provision_directory_user("alice", "ldap", vision.id, "member", NOW)
    assert (alice.directory, alice.tenant_id, alice.role, alice.password_hash) == ("ldap", vision.id, "member", "")
    again = store.provision_directory_user("alice", "ldap", nlp.id, "viewer", NOW)
    assert (again.id, again.tenant_id, again.role) == (alice.id, nlp.id, "viewer")
    assert store.find_user("alice") == again


def test_a_directory_never_takes_over_a_local_user_or_another_directorys(store: SqlStore) -> None:
    vision = store.create_tenant("vision", NOW)
    store.create_user("root2", "admin", NOW, tenant_id=vision.id, password_hash="x")
    with pytest.raises(ConflictError):
        store.provision_directory_user("root2", "ldap", vision.id, "member", NOW)
    store.provision_directory_user("bob", "oidc", vision.id, "member", NOW)
    with pytest.raises(ConflictError):
        store.provision_directory_user("bob", "ldap", vision.id, "admin", NOW)
    local = store.find_user("root2")
    assert local is not None and (local.role, local.directory) == ("admin", "")
