"""The key the audit chain's links and checkpoints are signed with: never in the database.

``AuditKey`` is the whole interface a key service has to offer (a KMS or an HSM implements the
same three members): the id of the key that signs now, ``sign`` under it, and ``verify`` under
any key it still knows (rotation: a new key signs, the old ones keep verifying the rows they
signed; every row names the id of its key).

``HmacKeyring`` is the shipped implementation, HMAC-SHA-256 under secrets read from the
environment or a file (``QTG_AUDIT_KEY``/``QTG_AUDIT_KEY_ID``, ``QTG_AUDIT_KEY_FILE``: one
``<key id> <secret>`` per line, the first line signs). ``docs/audit.md`` has the runbook.
"""

from __future__ import annotations

import hashlib
import hmac
from abc import ABC, abstractmethod
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Rows written before links were keyed carry this key id instead of a key's (migrations only).
LEGACY = "legacy"


class AuditKey(ABC):
    """Signs audit links and checkpoints; verifies them under the key id they name."""

    @property
    @abstractmethod
    def key_id(self) -> str:
        """The id of the key ``sign`` uses (stored beside every link)."""

    @abstractmethod
    def sign(self, message: bytes) -> str:
        """The hex signature of ``message`` under the current key."""

    @abstractmethod
    def verify(self, key_id: str, message: bytes, signature: str) -> bool | None:
        """Whether ``signature`` is ``message``'s under key ``key_id``; None: unknown key."""


class HmacKeyring(AuditKey):
    """HMAC-SHA-256 under named secrets; the first one signs, every one verifies."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise ImproperlyConfigured("the audit keyring is empty")
        for key_id, secret in keys:
            if not key_id or key_id == LEGACY or len(key_id) > 32 or " " in key_id:
                raise ImproperlyConfigured(f"audit key id {key_id!r} is not usable")
            if len(secret) < 16:
                raise ImproperlyConfigured(f"audit key {key_id!r} is shorter than 16 bytes")
        self._current = keys[0][0]
        self._secrets = dict(keys)

    @property
    def key_id(self) -> str:
        return self._current

    def sign(self, message: bytes) -> str:
        return hmac.new(self._secrets[self._current], message, hashlib.sha256).hexdigest()

    def verify(self, key_id: str, message: bytes, signature: str) -> bool | None:
        secret = self._secrets.get(key_id)
        if secret is None:
            return None
        expected = hmac.new(secret, message, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, signature or "")


def parse_key_file(text: str) -> list[tuple[str, bytes]]:
    """``<key id> <secret>`` per line (blank lines and ``#`` comments ignored)."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key_id, _, secret = line.partition(" ")
        if not secret.strip():
            raise ImproperlyConfigured(f"audit key file line {number}: '<key id> <secret>'")
        keys.append((key_id, secret.strip().encode()))
    return keys


def keyring_from_settings() -> AuditKey:
    """The keyring the settings name: the key file's keys, else the one key of the env."""
    path = settings.QTG_AUDIT_KEY_FILE
    if path:
        try:
            return HmacKeyring(parse_key_file(Path(path).read_text()))
        except OSError as exc:
            raise ImproperlyConfigured(f"QTG_AUDIT_KEY_FILE {path}: {exc.strerror}") from exc
    if not settings.QTG_AUDIT_KEY:
        raise ImproperlyConfigured(
            "no audit key: set QTG_AUDIT_KEY (and QTG_AUDIT_KEY_ID) or QTG_AUDIT_KEY_FILE"
        )
    return HmacKeyring([(settings.QTG_AUDIT_KEY_ID, settings.QTG_AUDIT_KEY.encode())])


_keyring: AuditKey | None = None


def audit_key() -> AuditKey:
    """The process's audit key, read once."""
    global _keyring
    if _keyring is None:
        _keyring = keyring_from_settings()
    return _keyring


def use_audit_key(key: AuditKey | None) -> AuditKey | None:
    """Make ``key`` the process's (None: read the settings again); returns the previous one."""
    global _keyring
    previous, _keyring = _keyring, key
    return previous
