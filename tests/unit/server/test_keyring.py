"""The secrets key file: created 0600, refused when too open, malformed or not the database's; rotation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.server.keyring import KeyringError, Sealed, load_keyring, read_key_file, write_key_file


def test_first_start_creates_a_private_key_file(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secrets.key"
    ring = load_keyring(path, set())
    assert path.stat().st_mode & 0o777 == 0o600
    sealed = ring.seal("hunter2", "ctx")
    assert "hunter2" not in sealed.token and sealed.key_id == ring.primary_id
    assert load_keyring(path, {ring.primary_id}).open(sealed, "ctx") == "hunter2"  # the same key after a restart


def test_a_value_opens_only_in_its_context(tmp_path: Path) -> None:
    ring = load_keyring(tmp_path / "k", set())
    sealed = ring.seal("v", "corral-secret:v1:1:db")
    with pytest.raises(KeyringError, match="does not open"):
        ring.open(sealed, "corral-secret:v1:2:db")  # copied into another tenant's row
    with pytest.raises(KeyringError, match="does not open"):
        ring.open(Sealed(sealed.key_id, sealed.token[:-4] + "AAAA"), "corral-secret:v1:1:db")  # altered


@pytest.mark.parametrize(
    ("case", "match"),
    [
        pytest.param("missing", "is missing but the database holds", id="missing-while-secrets-exist"),
        pytest.param("world-readable", r"readable by others \(mode 0644\)", id="too-open"),
        pytest.param("garbage", "line 2 is not a key", id="malformed"),
        pytest.param("other-key", "is not the key file of this database", id="wrong-key-file"),
    ],
)
def test_a_bad_key_file_stops_the_start_with_one_line(tmp_path: Path, case: str, match: str) -> None:
    path = tmp_path / "secrets.key"
    needed = {load_keyring(tmp_path / "original.key", set()).primary_id}
    if case == "world-readable":
        write_key_file(path, read_key_file(tmp_path / "original.key"))
        os.chmod(path, 0o644)
    elif case == "garbage":
        path.write_text("# comment\nnot-a-key\n")
        os.chmod(path, 0o600)
    elif case == "other-key":
        load_keyring(path, set())  # a fresh key file, e.g. from another installation
    with pytest.raises(KeyringError, match=match) as e:
        load_keyring(path, needed)
    assert e.value.field == "secrets_key_file" and "\n" not in e.value.message


def test_rotation_keeps_old_values_readable_until_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    ring = load_keyring(path, set())
    old = ring.seal("before", "c")
    new_id = ring.rotate_primary()
    assert new_id != old.key_id and ring.primary_id == new_id
    assert load_keyring(path, {old.key_id, new_id}).open(old, "c") == "before"  # both keys are in the file
    assert ring.seal("after", "c").key_id == new_id
    ring.forget([old.key_id])
    assert len(read_key_file(path)) == 1 and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(KeyringError, match="does not hold"):
        load_keyring(path, {new_id}).open(old, "c")
