"""The chain between the local exchanges: a withdrawal that has waited ``deliver_after``
seconds is broadcast (settled with a txid) and, when its address is a deposit address of an
account of this server (any venue), arrives there as a completed deposit of what was sent.

Real exchanges are joined by a blockchain; the local ones by this, so the demo's exchange to
exchange movements (``QTG_VENUES=local``) finish on their own. Off unless asked for
(``--deliver-after`` / ``LocalExchange(deliver_after=...)``); tests that play the chain
themselves leave it off, or ask for one delivery round (``POST /_control/deliver``).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from .ledger import COMPLETED, PENDING, PROCESSING, Refusal
from .wire import Venue

log = logging.getLogger("standins.exchange.courier")


def _owner(venues: dict[str, Venue], coin: str, network_id: str, address: str):
    """(venue, account) whose deposit address for ``coin`` on ``network_id`` is ``address``."""
    for name, venue in venues.items():
        books = venue.books
        try:
            network = books.coin(coin).network(network_id)
        except Refusal:
            continue
        with books.lock:
            accounts = list(books.accounts.values())
        for account in accounts:
            if account.deposit_address(name, coin, network).lower() == address.lower():
                return venue, account
    return None, None


def deliver_due(venues: dict[str, Venue], *, older_than: float) -> list[dict]:
    """Broadcast every withdrawal accepted more than ``older_than`` seconds ago and credit
    the deposits it makes; what was delivered."""
    delivered = []
    for venue in venues.values():
        books = venue.books
        cutoff = books.now() - timedelta(seconds=older_than)
        with books.lock:
            due = [
                w
                for w in books.withdrawals
                if w.status in (PENDING, PROCESSING) and w.created_at <= cutoff
            ]
        for withdrawal in due:
            try:
                settled = books.settle_withdrawal(
                    id=withdrawal.id, client_id=None, status=COMPLETED, txid=None
                )
            except Refusal:
                continue  # settled meanwhile by a test
            target, account = _owner(venues, settled.coin, settled.network, settled.address)
            entry = {"withdrawal": settled.id, "txid": settled.txid, "to": None}
            if target is not None:
                target.books.credit_deposit(
                    account=account.name,
                    coin=settled.coin,
                    network=settled.network,
                    amount=settled.sent,
                    address=settled.address,
                    txid=settled.txid,
                    tag=settled.tag,
                )
                entry["to"] = f"{target.name}/{account.name}"
            delivered.append(entry)
    return delivered


class Courier(threading.Thread):
    """Delivers due withdrawals every ``interval`` seconds until ``stopping`` is set."""

    def __init__(
        self,
        venues: dict[str, Venue],
        stopping: threading.Event,
        *,
        deliver_after: float,
        interval: float = 0.5,
    ) -> None:
        super().__init__(name="local-exchange-courier", daemon=True)
        self.venues = venues
        self.stopping = stopping
        self.deliver_after = deliver_after
        self.interval = interval

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                for entry in deliver_due(self.venues, older_than=self.deliver_after):
                    log.info("delivered %s", entry)
            except Exception:
                log.exception("courier round failed")
