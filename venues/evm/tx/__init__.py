"""The EVM transaction manager: one node's transactions (one nonce: the original and its fee
bumps), built, signed once, broadcast, looked at, and decided by a pure policy.

- ``build``: what is moved (``Transfer``, ``ContractCall``), its CREATED transaction at a
  nonce from QTG's allocator with a gas estimate and the chain's fees; pipelined: a sender's
  next nonce does not wait for the previous one's receipt, but at most
  ``QTG_EVM_MAX_IN_FLIGHT`` of its nonces are allocated and not mined at once (past it the
  node waits for a block, nothing taken);
- ``sign``: the bytes and hash stored (SIGNED) before anything is broadcast, never re-signed;
- ``broadcast``: the stored bytes to the node, its answer classified; a lost answer is
  ambiguous (UNKNOWN, recovery looks the hash up), never a failure;
- ``reads``: facts from the chain, each with the block it was answered at;
- ``policy``: pure, facts -> actions (confirm the winner, walk back, finalize by the one
  finality rule, re-send stored bytes, bump, wait, conclude, who used the nonce, what recovery
  concludes);
- ``track``: one look at a node's transactions: reads the facts, applies the policy;
- ``gaps``: nonces an ended node left unused, filled by a zero-value self-transfer;
- ``action``: ``ChainAction``, the ONE executor base for every node that sends an EVM
  transaction (the EVM transfer, CCTP's burn and mint; the CCTP allowance is the sender's own
  transaction, moved along by the same steps).

Building a chain action on it (e.g. CCTP V2's burn and mint)::

    from venues.evm.tx import ChainAction, ContractCall

    @register("cctp_v2_burn", provider="venues")
    class CctpV2Burn(ChainAction):
        def call(self, ctx) -> ContractCall:  # required: what the transaction does
            return ContractCall(chain=evm_chain(...), sender=address, account_name=name,
                                recipient=contract, symbol="USDC", units=units,
                                token=usdc, data="0x...")
        def before_first_nonce(self, ctx, call) -> dict:  # optional: checks, an allowance
            return {}                                      # (its dict joins the prepare detail)
        def before_look(self, ctx, call) -> None:  # optional: run before every observe
            ...
        def landed(self, ctx, look, observation):  # optional: check or re-read the effect
            return observation                     # of a COMPLETED (or a FAILED/UNKNOWN) look

``ChainAction`` does prepare (nonce, gas, fees), sign (bytes stored before broadcast),
submit (fenced broadcast of the stored bytes), observe (``track``: the action node itself
watches its transaction to the chain's finality; an observe node after it, e.g.
``evm_transfer_observe``, watches it through ``post_final_watch``; ``venues.evm.watch``
watches a node concluded FAILED) and recover (one ``track`` look and ``policy.recovered``).
Its ``observation(ctx, look)`` is the one mapping from a look to an ``Observation`` (REORG,
COMPLETED, FAILED, UNKNOWN for a conclusion of absence, else PENDING).
"""

from venues.evm.tx.action import ChainAction, recovery
from venues.evm.tx.broadcast import Sent, broadcast_transfer, send_stored
from venues.evm.tx.build import (
    ContractCall,
    Transfer,
    check_chain_id,
    create_with_new_nonce,
    fees,
    node_transactions,
    prepare_transfer,
    resolve_transfer,
    signer_of,
    signer_of_tx,
    transaction_by_hash,
)
from venues.evm.tx.common import ACTOR, rpc_read
from venues.evm.tx.heads import Head, head_and_receipts, latest
from venues.evm.tx.reads import finalized_block, moved, nonce_spender, revert_reason
from venues.evm.tx.sign import sign_stored
from venues.evm.tx.track import Track, track

__all__ = [
    "ACTOR",
    "ChainAction",
    "ContractCall",
    "Head",
    "Sent",
    "Track",
    "Transfer",
    "broadcast_transfer",
    "check_chain_id",
    "create_with_new_nonce",
    "fees",
    "finalized_block",
    "head_and_receipts",
    "latest",
    "moved",
    "node_transactions",
    "nonce_spender",
    "prepare_transfer",
    "recovery",
    "resolve_transfer",
    "revert_reason",
    "rpc_read",
    "send_stored",
    "sign_stored",
    "signer_of",
    "signer_of_tx",
    "track",
    "transaction_by_hash",
]
