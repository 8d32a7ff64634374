"""The chain the stand-in serves.

LiteSVM (from solders) executes transactions against real program code (System, SPL Token,
Associated Token Account) but has no notion of time: no slots, no commitment levels, no window
after which a blockhash is refused, no gap between "sent" and "landed". Those are exactly the
things a Solana executor must get right, so this module adds them around LiteSVM:

- a slot advances on a clock (or by hand); each slot is one block with its own blockhash, so
  block height equals the slot number;
- a sent transaction waits in a queue and lands in a later slot, and only while its blockhash
  is still valid (block height <= the hash's slot + the validity window); otherwise it never
  lands, as on the real network where leaders drop it;
- a landed transaction is `processed`, then `confirmed` after `confirmed_after` slots, then
  `finalized` after `finalized_after` slots;
- faults on request: drop the next sent transaction (accepted, never lands), hold the next one
  until a given slot, answer slowly, jump past every blockhash's validity.

Account reads (balances, token balances, account info) show the processed state whatever the
commitment asked: LiteSVM keeps one state, not one per commitment level.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from solders.account import Account
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM_ID
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import Transaction, VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata
from spl.token import instructions as spl
from spl.token.constants import MINT_LEN, TOKEN_PROGRAM_ID
from spl.token.models import InitializeMintParams, MintToParams

COMMITMENTS = ("processed", "confirmed", "finalized")
TOKEN_ACCOUNT_LEN = 165
FAUCET_LAMPORTS = 10**18


class LedgerError(ValueError):
    """A control request the ledger cannot carry out (unknown mint, bad amount...)."""


@dataclass(frozen=True)
class Settings:
    """How the chain behaves in time. Defaults follow mainnet: 400 ms slots, a blockhash usable
    for 150 slots (MAX_PROCESSING_AGE), finality after 32 slots."""

    slot_seconds: float = 0.4
    confirmed_after: int = 1
    finalized_after: int = 32
    blockhash_validity: int = 150
    # Slots are not blocks: a leader may produce no block for its slot (skipped). Every
    # ``skip_every``-th slot is skipped (0: none), and the chain starts at ``first_slot`` with
    # block height 0, so block height < slot as on mainnet (where they differ by millions).
    skip_every: int = 0
    first_slot: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.confirmed_after <= self.finalized_after:
            raise LedgerError("need 0 <= confirmed_after <= finalized_after")
        if self.slot_seconds <= 0 or self.blockhash_validity < 1:
            raise LedgerError("slot_seconds and blockhash_validity must be positive")
        if self.skip_every == 1 or self.skip_every < 0 or self.first_slot < 0:
            raise LedgerError("skip_every must be 0 or >= 2, first_slot >= 0")


@dataclass(frozen=True)
class TokenBalance:
    account_index: int
    mint: Pubkey
    owner: Pubkey
    amount: int
    decimals: int


@dataclass(frozen=True)
class Landed:
    """A transaction included in a block (successful or not: a failed one lands too)."""

    signature: str
    slot: int
    block_time: int
    transaction: VersionedTransaction
    err: object | None
    fee: int
    logs: list[str]
    compute_units: int
    pre_balances: list[int]
    post_balances: list[int]
    pre_token_balances: list[TokenBalance]
    post_token_balances: list[TokenBalance]


@dataclass
class Pending:
    signature: str
    transaction: VersionedTransaction
    blockhash: str
    land_at: int


@dataclass
class Faults:
    drop_next: int = 0
    dropped: set[str] = field(default_factory=set)
    hold_until: list[int] = field(default_factory=list)
    slow: dict[str, list[float]] = field(default_factory=dict)  # method or "*" -> [seconds, times]
    # A lagging status view: signature -> (monotonic deadline, the slot its view is stuck at).
    status_lag: dict[str, tuple[float, int]] = field(default_factory=dict)


class Ledger:
    """LiteSVM plus slots, commitment, the blockhash window and faults. Thread-safe."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._lock = threading.RLock()
        # Our own blockhash window decides what may land; LiteSVM's check knows only the latest.
        self.svm = LiteSVM().with_blockhash_check(False)
        self.faucet = Keypair()
        self._credit(self.faucet.pubkey(), FAUCET_LAMPORTS)
        self.slot = self.settings.first_slot
        self.height = 0  # blocks produced (block height), below the slot once slots are skipped
        self._height_at_slot: dict[int, int] = {self.slot: 0}
        self._height_of_hash: dict[str, int] = {}
        self._hash_at_slot: dict[int, str] = {}
        self.pending: dict[str, Pending] = {}
        self.landed: dict[str, Landed] = {}
        self.sends: dict[str, list[dict]] = defaultdict(list)
        self.faults = Faults()
        self.paused = False
        self._record_blockhash()

    # --- time --------------------------------------------------------------------------------

    def _record_blockhash(self) -> None:
        blockhash = str(self.svm.latest_blockhash())
        self._height_of_hash[blockhash] = self.height
        self._hash_at_slot[self.slot] = blockhash

    def skipped(self, slot: int) -> bool:
        every = self.settings.skip_every
        return bool(every) and slot % every == 0

    def tick(self) -> None:
        """One slot passes: a new block with a new blockhash (due transactions land in it),
        or, for a skipped slot, no block at all (the block height stays)."""
        with self._lock:
            self.slot += 1
            if self.skipped(self.slot):
                self._height_at_slot[self.slot] = self.height
                self._hash_at_slot[self.slot] = self._hash_at_slot[self.slot - 1]
                return
            self.height += 1
            self._height_at_slot[self.slot] = self.height
            self.svm.expire_blockhash()
            self._record_blockhash()
            for pending in sorted(self.pending.values(), key=lambda p: p.land_at):
                if pending.land_at > self.slot:
                    continue
                del self.pending[pending.signature]
                if self.blockhash_usable(pending.blockhash, self.height):
                    self._land(pending)

    def advance(self, slots: int) -> int:
        """Produce `slots` blocks at once; returns the new slot."""
        if slots < 0:
            raise LedgerError("slots must be >= 0")
        with self._lock:
            for _ in range(slots):
                self.tick()
            return self.slot

    def expire_blockhashes(self) -> int:
        """Jump until even the finalized block height is past the last valid block height of
        every blockhash handed out so far: no transaction sent until now can land any more, and
        every commitment level agrees. Returns the new slot."""
        with self._lock:
            newest = max(self._height_of_hash.values()) + self.settings.blockhash_validity
            while self.height_at("finalized") <= newest:
                self.tick()
            return self.slot

    def lag(self, commitment: str | None) -> int:
        commitment = commitment or "finalized"
        if commitment not in COMMITMENTS:
            raise LedgerError(f"unknown commitment {commitment!r}")
        return {
            "processed": 0,
            "confirmed": self.settings.confirmed_after,
            "finalized": self.settings.finalized_after,
        }[commitment]

    def slot_at(self, commitment: str | None) -> int:
        """The newest slot that has reached `commitment`."""
        with self._lock:
            return max(self.settings.first_slot, self.slot - self.lag(commitment))

    def height_at(self, commitment: str | None) -> int:
        """The block height of the newest slot that has reached `commitment`."""
        with self._lock:
            return self._height_at_slot[self.slot_at(commitment)]

    # --- blockhashes -------------------------------------------------------------------------

    def latest_blockhash(self, commitment: str | None) -> tuple[str, int, int]:
        """(blockhash, last valid block height, context slot) as of `commitment`."""
        with self._lock:
            slot = self.slot_at(commitment)
            blockhash = self._hash_at_slot[slot]
            return blockhash, self.last_valid_block_height(blockhash), slot

    def last_valid_block_height(self, blockhash: str) -> int:
        return self._height_of_hash[blockhash] + self.settings.blockhash_validity

    def blockhash_usable(self, blockhash: str, height: int) -> bool:
        """Whether a block at block height `height` may include a transaction on `blockhash`."""
        issued = self._height_of_hash.get(blockhash)
        return issued is not None and issued <= height <= self.last_valid_block_height(blockhash)

    # --- transactions ------------------------------------------------------------------------

    def simulate(self, tx: VersionedTransaction):
        """What LiteSVM says of the transaction against the current state (preflight)."""
        with self._lock:
            return self.svm.simulate_transaction(tx)

    def accept(self, tx: VersionedTransaction) -> str:
        """Take a sent transaction (preflight already passed or skipped); returns what became of
        it: duplicate, dropped, held, queued."""
        signature = str(tx.signatures[0])
        with self._lock:
            if signature in self.landed or signature in self.pending:
                outcome = "duplicate"
            elif signature in self.faults.dropped:
                outcome = "dropped"
            elif self.faults.drop_next:
                # Dropped for good: re-sending the same bytes does not revive it (a leader
                # that never includes it), so only a new transaction can carry the transfer.
                self.faults.drop_next -= 1
                self.faults.dropped.add(signature)
                outcome = "dropped"
            else:
                land_at = self.slot + 1
                if self.faults.hold_until:
                    land_at = max(land_at, self.faults.hold_until.pop(0))
                    outcome = "held"
                else:
                    outcome = "queued"
                blockhash = str(tx.message.recent_blockhash)
                self.pending[signature] = Pending(signature, tx, blockhash, land_at)
            self.sends[signature].append({"slot": self.slot, "outcome": outcome})
            return outcome

    def _land(self, pending: Pending) -> None:
        tx = pending.transaction
        keys = list(tx.message.account_keys)
        pre_balances = [self.svm.get_balance(key) or 0 for key in keys]
        pre_tokens = self._token_balances(keys)
        result = self.svm.send_transaction(tx)
        if isinstance(result, FailedTransactionMetadata):
            err, meta = result.err(), result.meta()
        else:
            err, meta = None, result
        self.landed[pending.signature] = Landed(
            signature=pending.signature,
            slot=self.slot,
            block_time=int(time.time()),
            transaction=tx,
            err=err,
            fee=meta.fee(),
            logs=list(meta.logs()),
            compute_units=meta.compute_units_consumed(),
            pre_balances=pre_balances,
            post_balances=[self.svm.get_balance(key) or 0 for key in keys],
            pre_token_balances=pre_tokens,
            post_token_balances=self._token_balances(keys),
        )

    def status_view_slot(self, signatures: list[str]) -> int:
        """The slot the status view answers at: the processed slot, or, while one of
        `signatures` is in a lagging view, the slot that view is stuck at."""
        with self._lock:
            now = time.monotonic()
            stuck = [
                slot
                for signature in signatures
                if (lag := self.faults.status_lag.get(signature))
                and (slot := lag[1]) is not None
                and now < lag[0]
            ]
            return min([self.slot_at("processed"), *stuck])

    def status(self, signature: str) -> tuple[Landed, str, int | None] | None:
        """(landed, confirmation status, confirmations) or None when it has not landed (or
        the status view lags behind its landing)."""
        with self._lock:
            landed = self.landed.get(signature)
            if landed is None:
                return None
            lag = self.faults.status_lag.get(signature)
            if lag is not None and time.monotonic() < lag[0] and landed.slot > lag[1]:
                return None
            depth = self.slot - landed.slot
            if depth >= self.settings.finalized_after:
                return landed, "finalized", None
            if depth >= self.settings.confirmed_after:
                return landed, "confirmed", depth
            return landed, "processed", depth

    # --- accounts and tokens -----------------------------------------------------------------

    def balance(self, pubkey: Pubkey) -> int:
        with self._lock:
            return self.svm.get_balance(pubkey) or 0

    def account(self, pubkey: Pubkey):
        with self._lock:
            account = self.svm.get_account(pubkey)
            return None if account is None or account.lamports == 0 else account

    def rent_exempt_minimum(self, size: int) -> int:
        with self._lock:
            return self.svm.minimum_balance_for_rent_exemption(size)

    def token_account(self, pubkey: Pubkey) -> tuple[Pubkey, Pubkey, int, int] | None:
        """(mint, owner, amount, decimals) of an SPL token account, or None."""
        with self._lock:
            account = self.account(pubkey)
            if account is None or account.owner != TOKEN_PROGRAM_ID:
                return None
            data = bytes(account.data)
            if len(data) != TOKEN_ACCOUNT_LEN:
                return None
            mint = Pubkey.from_bytes(data[0:32])
            owner = Pubkey.from_bytes(data[32:64])
            amount = int.from_bytes(data[64:72], "little")
            return mint, owner, amount, self.mint_decimals(mint)

    def mint_decimals(self, mint: Pubkey) -> int:
        account = self.account(mint)
        if account is None or account.owner != TOKEN_PROGRAM_ID or len(account.data) != MINT_LEN:
            raise LedgerError(f"{mint} is not an SPL mint")
        return bytes(account.data)[44]

    def _token_balances(self, keys: list[Pubkey]) -> list[TokenBalance]:
        balances = []
        for index, key in enumerate(keys):
            token = self.token_account(key)
            if token is not None:
                mint, owner, amount, decimals = token
                balances.append(TokenBalance(index, mint, owner, amount, decimals))
        return balances

    # --- control: money ----------------------------------------------------------------------

    def airdrop(self, pubkey: Pubkey, lamports: int) -> int:
        if lamports <= 0:
            raise LedgerError("lamports must be positive")
        with self._lock:
            self._credit(pubkey, lamports)
            return self.balance(pubkey)

    def _credit(self, pubkey: Pubkey, lamports: int) -> None:
        # Written straight into the account: LiteSVM's own airdrop draws on a faucet of limited
        # size, and tests need as much SOL as they ask for.
        account = self.svm.get_account(pubkey)
        if account is None:
            account = Account(0, b"", SYSTEM_PROGRAM_ID)
        self.svm.set_account(
            pubkey,
            Account(
                account.lamports + lamports,
                bytes(account.data),
                account.owner,
                account.executable,
                account.rent_epoch,
            ),
        )

    def _execute(self, instructions: list, signers: list[Keypair]) -> None:
        """Run a setup transaction at once, outside the queue (control API only)."""
        payer = self.faucet
        message = Message(instructions, payer.pubkey())
        tx = Transaction([payer, *signers], message, self.svm.latest_blockhash())
        result = self.svm.send_transaction(tx)
        if isinstance(result, FailedTransactionMetadata):
            raise LedgerError(f"setup transaction failed: {result.err()}")
        # A fresh blockhash: LiteSVM refuses a second identical setup transaction otherwise.
        self.svm.expire_blockhash()
        self._record_blockhash_same_slot()

    def _record_blockhash_same_slot(self) -> None:
        blockhash = str(self.svm.latest_blockhash())
        self._height_of_hash[blockhash] = self.height

    def create_mint(self, decimals: int = 6) -> Pubkey:
        """A new SPL mint whose authority is the stand-in's faucet."""
        if not 0 <= decimals <= 18:
            raise LedgerError("decimals must be 0..18")
        mint = Keypair()
        with self._lock:
            rent = self.svm.minimum_balance_for_rent_exemption(MINT_LEN)
            self._execute(
                [
                    create_account(
                        CreateAccountParams(
                            from_pubkey=self.faucet.pubkey(),
                            to_pubkey=mint.pubkey(),
                            lamports=rent,
                            space=MINT_LEN,
                            owner=TOKEN_PROGRAM_ID,
                        )
                    ),
                    spl.initialize_mint(
                        InitializeMintParams(
                            decimals=decimals,
                            mint=mint.pubkey(),
                            mint_authority=self.faucet.pubkey(),
                            program_id=TOKEN_PROGRAM_ID,
                        )
                    ),
                ],
                [mint],
            )
        return mint.pubkey()

    def create_token_account(self, mint: Pubkey, owner: Pubkey) -> Pubkey:
        """The owner's associated token account for `mint` (created when missing)."""
        with self._lock:
            self.mint_decimals(mint)
            address = spl.get_associated_token_address(owner, mint)
            if self.account(address) is None:
                self._execute(
                    [spl.create_associated_token_account(self.faucet.pubkey(), owner, mint)], []
                )
            return address

    def mint_to(self, mint: Pubkey, owner: Pubkey, amount: Decimal | str) -> Pubkey:
        """Mint `amount` whole tokens (a decimal string) into the owner's associated account."""
        with self._lock:
            decimals = self.mint_decimals(mint)
            base_units = Decimal(amount).scaleb(decimals)
            if base_units != base_units.to_integral_value() or base_units <= 0:
                raise LedgerError(f"{amount} is not a positive amount with <= {decimals} decimals")
            address = self.create_token_account(mint, owner)
            self._execute(
                [
                    spl.mint_to(
                        MintToParams(
                            program_id=TOKEN_PROGRAM_ID,
                            mint=mint,
                            dest=address,
                            mint_authority=self.faucet.pubkey(),
                            amount=int(base_units),
                        )
                    )
                ],
                [],
            )
            return address

    # --- control: faults ---------------------------------------------------------------------

    def drop_next(self, count: int = 1) -> None:
        with self._lock:
            self.faults.drop_next += count

    def hold_next(self, until_slot: int) -> None:
        """The next transaction sent lands at `until_slot` (if its blockhash is still valid)."""
        with self._lock:
            self.faults.hold_until.append(until_slot)

    def lag_status(self, signature: str, seconds: float) -> None:
        """For `seconds` from now, the status view of `signature` is stuck at the current
        slot: getSignatureStatuses answers null for a landing after it, with that slot as
        its context (a node whose status cache is behind)."""
        with self._lock:
            self.faults.status_lag[signature] = (time.monotonic() + float(seconds), self.slot)

    def set_slow(self, seconds: float, method: str = "*", times: int | None = None) -> None:
        with self._lock:
            self.faults.slow[method] = [seconds, -1 if times is None else times]

    def delay_for(self, method: str) -> float:
        """Seconds to hold the answer to `method` (after doing the work), using up one time."""
        with self._lock:
            for key in (method, "*"):
                entry = self.faults.slow.get(key)
                if entry is None:
                    continue
                seconds, times = entry
                if times == 0:
                    continue
                if times > 0:
                    entry[1] -= 1
                return seconds
            return 0.0

    def clear_faults(self) -> None:
        with self._lock:
            self.faults = Faults()

    def snapshot(self) -> dict:
        """What tests inspect: slots per commitment, queue, landed transactions, every send."""
        with self._lock:
            return {
                "slot": self.slot,
                "height": self.height,
                "slots": {c: self.slot_at(c) for c in COMMITMENTS},
                "heights": {c: self.height_at(c) for c in COMMITMENTS},
                "paused": self.paused,
                "settings": vars(self.settings),
                "pending": {s: p.land_at for s, p in self.pending.items()},
                "landed": {
                    s: {"slot": item.slot, "err": None if item.err is None else str(item.err)}
                    for s, item in self.landed.items()
                },
                "sends": dict(self.sends),
                "faults": {
                    "drop_next": self.faults.drop_next,
                    "dropped": sorted(self.faults.dropped),
                    "hold_until": list(self.faults.hold_until),
                    "slow": dict(self.faults.slow),
                },
            }
