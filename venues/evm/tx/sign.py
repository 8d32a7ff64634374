"""Sign: the bytes and hash stored (SIGNED) before anything is broadcast; a second call
returns the stored transaction, never signs again."""

from venues.evm.faults import crash_point
from venues.evm.tx.common import ACTOR, S, unsigned_for_signing
from venues.models import ChainTransaction
from venues.signing import Signer
from venues.transactions import chain_transaction_transition


def sign_stored(tx: ChainTransaction, signer: Signer) -> ChainTransaction:
    """Sign a CREATED transaction and store its bytes and hash (SIGNED) before anyone may
    broadcast them. Already signed: the stored transaction, never signed again."""
    if tx.state != S.CREATED:
        return tx
    signed = signer.sign_transaction(tx.chain, unsigned_for_signing(tx.unsigned))
    tx = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.SIGNED,
        actor=ACTOR,
        expected=[S.CREATED],
        fields={"raw_signed": "0x" + signed.raw.hex(), "tx_hash": signed.tx_hash},
        evidence={"tx_hash": signed.tx_hash, "nonce": tx.nonce},
    )
    crash_point("after_sign")
    return tx
