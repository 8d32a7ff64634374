"""What the chain proves about one signed transaction: a pure rule, no I/O.

Inputs are what the executor read from the node, in this order: the signature's status, then
the block height at the final commitment and whether the blockhash is still valid. The order
matters: a status read *after* the height could miss a landing that happened in between.

- a status at or past ``wanted``: landed deep enough, and FAILED if it carries an error
  (fees paid, nothing moved);
- a shallower status: landed, not yet deep enough;
- no status, the finalized block height past the blockhash's last valid height, the node
  calling the blockhash invalid, AND the null status answered at a context slot at or past
  the finalized slot where that height was read: EXPIRED. No block from there on may include
  it, and the status view covers every block up to it: it can never land. A status view that
  lags (its context slot behind that point) proves nothing: PENDING. Where the chain lists
  several RPC endpoints, every one that is not lagging must agree (``contradiction`` is None:
  none erred, none answered short of that slot); one that shows the landing makes it landed
  (``read_chain`` then carries its status).
- otherwise PENDING: it may still land; re-sending the same bytes is safe (one signature).
"""

from dataclasses import dataclass, field
from enum import StrEnum

from venues.solana.family import SOLANA

COMMITMENTS = SOLANA.finality  # the family's finality vocabulary, weakest first


class Fate(StrEnum):
    PENDING = "PENDING"  # not seen in a block; may still land
    LANDED = "LANDED"  # in a block, not yet at the commitment wanted
    SETTLED = "SETTLED"  # at (or past) the commitment wanted, without error
    FAILED = "FAILED"  # in a block with an error
    EXPIRED = "EXPIRED"  # never landed and never can


@dataclass(frozen=True)
class Seen:
    """One reading of the chain about a transaction."""

    landed_slot: int | None
    level: str | None  # processed / confirmed / finalized, when landed
    err: str | None
    final_height: int
    blockhash_valid: bool
    last_valid_block_height: int
    confirmations: int | None = None  # slots since it landed; None once finalized
    fee: int | None = None  # lamports paid, once read (confirmed)
    status_slot: int | None = None  # the context slot of the (null) status answer
    final_slot: int | None = None  # the finalized slot, read after ``final_height``
    # Several endpoints: why they do not all agree that it never landed (None: they do, or
    # there is only one), each endpoint's answer, and the endpoint whose status is carried.
    contradiction: str | None = None
    endpoints: tuple[dict, ...] = field(default=())
    seen_at: str | None = None


def fate(seen: Seen, *, wanted: str) -> Fate:
    if seen.landed_slot is not None:
        # Even a failure waits for the commitment wanted: a processed block may be abandoned.
        if COMMITMENTS.index(seen.level or "processed") < COMMITMENTS.index(wanted):
            return Fate.LANDED
        return Fate.FAILED if seen.err is not None else Fate.SETTLED
    covered = (
        seen.status_slot is not None
        and seen.final_slot is not None
        and seen.status_slot >= seen.final_slot
    )
    agreed = seen.contradiction is None
    if (
        seen.final_height > seen.last_valid_block_height
        and not seen.blockhash_valid
        and covered
        and agreed
    ):
        return Fate.EXPIRED
    return Fate.PENDING
