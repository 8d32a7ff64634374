"""Who signs: the ``Signer`` interface and the built-in signer that holds a key in memory.

A chain account in ``venues/chains.yaml`` names where its key is, never the key itself:

    key: {env: TREASURY_KEY}                                   # a hex key in an env variable
    key: {file: /run/secrets/treasury_key}                     # a hex key in a file
    key: {keystore: /etc/qtg/treasury.json, password_env: TREASURY_KEY_PASSWORD}
    key: {backend: kms, ...}                                   # a registered signer backend

Keys are never stored in the database and never logged (a signer's repr shows its address
only). A KMS, HSM or MPC signer is a ``Signer`` subclass registered under a backend name with
``register_signer_backend``: the executors only ever call ``address()`` and
``sign_transaction(chain, tx)``.
"""

import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from venues import conf


@dataclass(frozen=True)
class SignedTransaction:
    """The bytes to broadcast and the hash (or signature) the chain will know them by."""

    raw: bytes
    tx_hash: str


class Signer(ABC):
    """Signs transactions for one account. Implementations keep their key material to
    themselves (a KMS signer holds none at all)."""

    @abstractmethod
    def address(self) -> str:
        """The account's address on its chain (EIP-55 checksummed for EVM)."""

    @abstractmethod
    def sign_transaction(self, chain: str, tx: Mapping[str, Any]) -> SignedTransaction:
        """Sign ``tx`` (the chain's transaction fields) for ``chain``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address()}>"


class LocalKeySigner(Signer):
    """An EVM key held in this process's memory (eth-account)."""

    def __init__(self, private_key: str | bytes) -> None:
        from venues.ethlib import Account

        try:
            self.__account = Account.from_key(private_key)
        except (ValueError, TypeError):
            # The key itself is never part of the message.
            raise ImproperlyConfigured("the configured private key is not a valid key") from None

    def address(self) -> str:
        return self.__account.address

    def sign_transaction(self, chain: str, tx: Mapping[str, Any]) -> SignedTransaction:
        signed = self.__account.sign_transaction(dict(tx))
        return SignedTransaction(bytes(signed.raw_transaction), signed.hash.to_0x_hex())


SignerFactory = Callable[[Mapping[str, Any], str], Signer]
_backends: dict[str, SignerFactory] = {}
_signers: dict[tuple[str, str], Signer] = {}
_lock = threading.Lock()


def register_signer_backend(name: str, factory: SignerFactory) -> None:
    """Let accounts say ``key: {backend: name, ...}``: ``factory(key_config, what)`` returns
    their ``Signer`` (a KMS, HSM or MPC client)."""
    _backends[name] = factory


def signer_for(key: Mapping[str, Any], *, what: str) -> Signer:
    """The signer of an account whose key config is ``key`` (``what`` names the account in
    errors). Built once per process and per key config: a keystore is decrypted once."""
    if not isinstance(key, Mapping) or not key:
        raise ImproperlyConfigured(f"{what}: 'key' must name an env variable, file or keystore")
    cache_key = (what, json.dumps(dict(key), sort_keys=True, default=str))
    with _lock:
        signer = _signers.get(cache_key)
        if signer is None:
            signer = _build(key, what=what)
            _signers[cache_key] = signer
    return signer


def forget_signers() -> None:
    """Drop the signers built so far (after the configuration or the environment changed)."""
    with _lock:
        _signers.clear()


def _build(key: Mapping[str, Any], *, what: str) -> Signer:
    if "backend" in key:
        backend = str(key["backend"])
        if backend not in _backends:
            raise ImproperlyConfigured(f"{what}: no signer backend {backend!r} is registered")
        return _backends[backend](key, what)
    if "keystore" in key:
        return _from_keystore(Path(str(key["keystore"])), key.get("password_env"), what=what)
    return LocalKeySigner(conf.secret(dict(key), what=f"{what} key"))


def _from_keystore(path: Path, password_env: Any, *, what: str) -> Signer:
    from venues.ethlib import Account

    if not password_env:
        raise ImproperlyConfigured(f"{what}: a keystore needs 'password_env'")
    password = os.environ.get(str(password_env), "")
    if not password:
        raise ImproperlyConfigured(f"{what}: environment variable {password_env} is empty")
    try:
        keystore = json.loads(path.read_text())
    except OSError as exc:
        raise ImproperlyConfigured(f"{what}: cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise ImproperlyConfigured(f"{what}: {path} is not a JSON keystore") from None
    try:
        private_key = Account.decrypt(keystore, password)
    except ValueError:
        raise ImproperlyConfigured(f"{what}: wrong password for keystore {path}") from None
    return LocalKeySigner(private_key)
