"""The Solana side of the ``venues.signing.Signer`` interface.

A Solana signer signs the serialized transaction *message* (ed25519 over its bytes); the
executors hand it ``{"message": <base64>}`` and get back the wire transaction and its first
signature (the transaction's id on chain). The built-in backend, ``solana-keypair``, holds a
keypair read from the env var or file the account's ``key`` names; a KMS/HSM/MPC backend
registered with ``register_signer_backend`` is used instead when the key says ``backend:``.
"""

import base64
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from solders.keypair import Keypair
from solders.message import Message
from solders.transaction import Transaction

from venues import conf
from venues.signing import SignedTransaction, Signer, register_signer_backend, signer_for

from .keys import KeypairError, keypair_from_secret

BACKEND = "solana-keypair"


class SolanaKeypairSigner(Signer):
    """A Solana keypair held in this process's memory; its repr shows the address only."""

    def __init__(self, keypair: Keypair) -> None:
        self.__keypair = keypair

    def address(self) -> str:
        return str(self.__keypair.pubkey())

    def sign_transaction(self, chain: str, tx: Mapping[str, Any]) -> SignedTransaction:
        message = Message.from_bytes(base64.b64decode(tx["message"]))
        if message.account_keys[0] != self.__keypair.pubkey():
            raise ValueError(f"the fee payer is not {self.address()}")
        signed = Transaction([self.__keypair], message, message.recent_blockhash)
        return SignedTransaction(bytes(signed), str(signed.signatures[0]))


def _keypair_signer(key: Mapping[str, Any], what: str) -> Signer:
    reference = {name: value for name, value in key.items() if name in ("env", "file")}
    try:
        return SolanaKeypairSigner(
            keypair_from_secret(conf.secret(reference, what=what), what=what)
        )
    except KeypairError as exc:
        raise ImproperlyConfigured(str(exc)) from None


register_signer_backend(BACKEND, _keypair_signer)


def solana_signer(key: Mapping[str, Any], *, what: str) -> Signer:
    """The signer of a Solana account: its registered backend, or the built-in keypair."""
    if "backend" not in key:
        key = {"backend": BACKEND, **key}
    return signer_for(key, what=what)
