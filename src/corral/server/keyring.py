"""The secrets key file: AES-256-GCM keys kept apart from the database (0600), sealing every stored credential.

File format: one key per line, URL-safe base64 of 32 random bytes; the first line is the primary key (it
seals new values), the others only open values sealed before a rotation; `#` starts a comment. Each sealed
value records the id of its key (a hash of the key, never the key), so a start with a wrong or missing key
file is refused with one line instead of failing later on the first secret it cannot open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from corral.core.errors import ValidationError

KEY_FILE_NAME = "secrets.key"
SETTING = "secrets_key_file"  # the field named by every error about the key file
_NONCE_BYTES = 12


@dataclass(frozen=True, slots=True)
class Sealed:
    """An encrypted value as stored: the key's id and base64(nonce + ciphertext + tag)."""

    key_id: str
    token: str


class KeyringError(ValidationError):
    """The key file is missing, unreadable, too open, malformed, or does not open what the database holds."""

    def __init__(self, problem: str) -> None:
        super().__init__(SETTING, problem)


def compute_key_id(key: bytes) -> str:
    """A stable public name of a key: 16 hex digits of its SHA-256 (reveals nothing usable about the key)."""
    return hashlib.sha256(b"corral-key-id:" + key).hexdigest()[:16]


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


class Keyring:
    """Seal and open values with the keys of one key file. Thread-safe; `rotate_primary` swaps keys live."""

    def __init__(self, path: Path, keys: list[bytes]) -> None:
        if not keys:
            raise KeyringError(f"{path} holds no key")
        self.path = path
        self._lock = threading.Lock()
        self._keys = {compute_key_id(k): k for k in keys}
        self._primary = compute_key_id(keys[0])

    @property
    def primary_id(self) -> str:
        return self._primary

    @property
    def key_ids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._keys)

    def seal(self, plaintext: str, context: str) -> Sealed:
        """Encrypt with the primary key. `context` (e.g. the tenant and name) is authenticated, not stored:
        the value opens only under the same context, so a row copied elsewhere in the database is useless."""
        with self._lock:
            key_id, key = self._primary, self._keys[self._primary]
        nonce = os.urandom(_NONCE_BYTES)
        data = AESGCM(key).encrypt(nonce, plaintext.encode("utf-8"), context.encode("utf-8"))
        return Sealed(key_id, base64.b64encode(nonce + data).decode("ascii"))

    def open(self, sealed: Sealed, context: str) -> str:
        """Decrypt. Raises KeyringError when the key is not in the file or the value or context do not match."""
        with self._lock:
            key = self._keys.get(sealed.key_id)
        if key is None:
            raise KeyringError(f"a stored value needs key {sealed.key_id}, which {self.path} does not hold")
        try:
            raw = base64.b64decode(sealed.token.encode("ascii"), validate=True)
            return AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode("utf-8")).decode("utf-8")
        except (InvalidTag, binascii.Error, ValueError) as e:
            raise KeyringError(f"a stored value sealed with key {sealed.key_id} does not open (altered?)") from e

    def rotate_primary(self) -> str:
        """Make a new key the primary, keeping the old ones to open existing values; writes the file first."""
        with self._lock:
            key = new_key()
            write_key_file(self.path, [key, *self._keys.values()])
            self._keys = {compute_key_id(key): key, **self._keys}
            self._primary = compute_key_id(key)
            return self._primary

    def forget(self, key_ids: Iterable[str]) -> None:
        """Drop keys no stored value uses any more (never the primary); rewrites the file."""
        with self._lock:
            drop = set(key_ids) - {self._primary}
            self._keys = {i: k for i, k in self._keys.items() if i not in drop}
            write_key_file(self.path, list(self._keys.values()))  # the primary stays first (dict order)


def write_key_file(path: Path, keys: list[bytes]) -> None:
    """Atomically (tmp, fsync, rename), created 0600: the primary key first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("# Corral secrets key file: keep it apart from the database backups; the first key seals.\n")
        f.writelines(base64.urlsafe_b64encode(k).decode("ascii") + "\n" for k in keys)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _check_private(path: Path) -> None:
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise KeyringError(f"{path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise KeyringError(f"{path} belongs to uid {info.st_uid}, not to the server's user (uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise KeyringError(f"{path} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}): chmod 600 {path}")


def read_key_file(path: Path) -> list[bytes]:
    _check_private(path)
    keys = []
    for n, line in enumerate(path.read_text(encoding="ascii", errors="replace").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            key = base64.urlsafe_b64decode(text.encode("ascii"))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            key = b""
        if len(key) != 32:
            raise KeyringError(f"{path} line {n} is not a key (URL-safe base64 of 32 bytes)")
        keys.append(key)
    return keys


def load_keyring(path: Path, needed_key_ids: set[str]) -> Keyring:
    """Open the key file, creating it when absent and nothing sealed exists yet. Raises KeyringError (one line
    saying why and what to do) when it is missing while the database holds sealed values, is readable by
    others, malformed, or lacks a key that stored values were sealed with (a wrong key file)."""
    if not path.exists():
        if needed_key_ids:
            raise KeyringError(
                f"{path} is missing but the database holds values sealed with key(s) "
                f"{', '.join(sorted(needed_key_ids))}: restore the key file (CORRAL_SECRETS_KEY_FILE)"
            )
        write_key_file(path, [new_key()])
    try:
        keyring = Keyring(path, read_key_file(path))
    except OSError as e:
        raise KeyringError(f"cannot read {path}: {e.strerror or e}") from e
    missing = needed_key_ids - keyring.key_ids
    if missing:
        raise KeyringError(
            f"{path} is not the key file of this database: it lacks key(s) "
            f"{', '.join(sorted(missing))} that stored values were sealed with"
        )
    return keyring
