"""The exchange lane's executors (``cex_withdraw``, ``cex_withdrawal_observe``,
``cex_deposit_observe``) against real exchanges through ccxt, registered under the provider
``venues``: ``QTG_VENUES`` (or ``QTG_EXECUTORS``) decides whether they or the sandbox serve the
templates.

Exactly once. The node attempt's idempotency key is the withdrawal's client id (Binance's
``withdrawOrderId``), and a journal row (``CexWithdrawal``) is committed before the request is
sent. After a lost answer (a timeout after the exchange accepted, a dropped connection)
recovery asks the exchange for the client id; "not found" proves nothing until the account's
visibility window (``visibility_seconds``: how long its history may lag) has passed since the
submit began, which the worker's rules enforce (``Executor.visibility_window``).

Upbit has no client withdrawal id. Recovery there matches its withdrawal history by what the
journal says was asked: currency, network, the exact amount, created no earlier than the
second the submit began, and not an id another journal row already accounts for. The records
carry no address, so two withdrawals of the same amount from one account could not be told
apart: ``prepare`` holds a withdrawal back (TransientError) while another of the same
(account, currency, network, amount) has an unknown outcome.
"""

import re
import time
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    Submitted,
    TransientError,
    Upstream,
)
from movements.executors.registry import register
from qtg.core.venues import EVM_ADDRESS, is_chain_address
from venues.cex import journal, ratelimit, venue
from venues.cex.client import secrets_of
from venues.cex.config import ExchangeAccount, account, is_account, plain
from venues.cex.errors import scrub
from venues.cex.records import Record

PROVIDER = "venues"
# What an exchange takes as a client withdrawal id (Binance: up to 100 of these characters).
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
# The smallest unit an amount is split into (an 18-decimal token's).
SPLIT_UNIT = Decimal("1e-18")
# Upbit's history gives whole seconds: a withdrawal created in the second the submit began
# counts, and a little clock difference between us and the exchange too.
HISTORY_SLACK = timedelta(seconds=2)


def _account(name: str, *, role: str = "venue") -> ExchangeAccount:
    try:
        return account(name)
    except LookupError as exc:
        raise DeterministicError(f"{role} {name!r}: {exc}") from None


def _network_id(acct: ExchangeAccount, network: str) -> str:
    try:
        return acct.network_id(network)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


def _leg_amount(amount: Decimal, config: dict[str, Any], node_key: str) -> Decimal:
    """The whole amount, or with ``part: "k/n"`` the k-th of n equal parts (the last takes
    what rounding left, so the parts add up exactly)."""
    part = str(config.get("part") or "")
    if not part:
        return amount
    k, _, n = part.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise DeterministicError(f"node {node_key}: part must be k/n, got {part!r}")
    share = (amount / int(n)).quantize(SPLIT_UNIT, rounding=ROUND_DOWN)
    return share if int(k) < int(n) else amount - share * (int(n) - 1)


_addresses: dict[tuple[str, str, str], str] = {}


def _destination_address(destination: str, coin: str, network: str) -> str:
    """Where a withdrawal to ``destination`` goes: a chain address as given, or a configured
    exchange account's deposit address (configured, else asked of that exchange once)."""
    if is_chain_address(destination):
        return destination.strip()
    target = _account(destination, role="destination")
    configured = target.deposit_addresses.get(network.lower())
    if configured:
        return configured
    network_id = _network_id(target, network)
    key = (target.name, coin, network_id)
    if key not in _addresses:
        address = venue.deposit_address(target, coin, network_id)
        if not address:
            raise DeterministicError(f"{destination} gives no {coin} address on {network_id}")
        _addresses[key] = address
    return _addresses[key]


def _submit_budget() -> float:
    """How long a submit may wait out a rate limit: well inside the lease the worker keeps."""
    return max(0.0, min(settings.QTG_LEASE_SECONDS / 3, 20.0))


def _scrubbed(acct: ExchangeAccount, text: str) -> str:
    return scrub(text, secrets_of(acct))


@register("cex_withdraw", provider=PROVIDER)
class CexWithdraw(Executor):
    """Withdraw from an exchange account. The exchange's acceptance completes this node (the
    observe nodes after it watch the withdrawal leave and the deposit arrive)."""

    needs_upstream = False
    external_ref_name = "withdrawal id"

    def visibility_window(self, ctx: ExecutionContext) -> float:
        try:
            return account(ctx.config.get("venue", "")).visibility_seconds
        except LookupError:
            return self.visibility_seconds

    def validate(self, spec: NodeSpec) -> None:
        for name in ("venue", "to", "network"):
            if not spec.config.get(name):
                raise DeterministicError(f"node {spec.node_key}: config lacks {name}")
        source = _account(spec.config["venue"], role="source")
        _network_id(source, spec.config["network"])
        destination = spec.config["to"]
        if not is_chain_address(destination) and not is_account(destination):
            raise DeterministicError(
                f"destination {destination!r} is neither a chain address nor a configured "
                "exchange account"
            )
        if not isinstance(spec.amount, Decimal) or spec.amount <= 0:
            raise DeterministicError(f"amount must be a positive decimal, got {spec.amount!r}")
        _leg_amount(spec.amount, spec.config, spec.node_key)

    def _plan(self, ctx: ExecutionContext) -> dict[str, Any]:
        acct = _account(ctx.config.get("venue", ""), role="source")
        network = str(ctx.config.get("network") or "")
        network_id = _network_id(acct, network)
        amount = _leg_amount(ctx.amount, ctx.config, ctx.node_key)
        address = _destination_address(str(ctx.config.get("to") or ""), ctx.asset, network)
        if EVM_ADDRESS.match(address) is None and network_id == "ETH":
            raise DeterministicError(f"{address!r} is no address on {network}")
        return {
            "account": acct,
            "network_id": network_id,
            "amount": amount,
            "address": address,
        }

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        plan = self._plan(ctx)
        acct: ExchangeAccount = plan["account"]
        try:
            credential = f"{acct.kind}:{acct.credentials().fingerprint}"
        except ImproperlyConfigured as exc:
            raise DeterministicError(f"exchange account {acct.name}: {exc}") from None
        if (blocked := ratelimit.blocked_for(credential)) > 0:
            raise TransientError(
                f"{acct.exchange} told this key to wait: {blocked:.0f}s left",
                retry_after=blocked,
            )
        checked = venue.preflight(acct, ctx.asset, plan["amount"])
        if acct.kind == "upbit":
            twin = journal.unresolved_twin(
                client_id=ctx.idempotency_key,
                exchange=acct.exchange,
                account=acct.name,
                coin=ctx.asset,
                network=plan["network_id"],
                amount=plan["amount"],
            )
            if twin is not None:
                raise TransientError(
                    f"withdrawal {twin.client_id} of the same amount has an unknown outcome: "
                    "Upbit's history could not tell the two apart",
                    retry_after=acct.visibility_seconds / 4 or None,
                )
        return Prepared(
            {
                "exchange": acct.exchange,
                "account": acct.name,
                "network_id": plan["network_id"],
                "address": plan["address"],
                "amount": plain(plan["amount"]),
                **checked,
            }
        )

    def submit(self, ctx: ExecutionContext) -> Submitted:
        plan = self._plan(ctx)
        acct: ExchangeAccount = plan["account"]
        if not CLIENT_ID.fullmatch(ctx.idempotency_key or ""):
            # Binance signs the withdraw body as sent, unencoded: keep the id to safe bytes.
            raise DeterministicError(
                f"idempotency key {ctx.idempotency_key!r} cannot be a client withdrawal id"
            )
        try:
            row = journal.withdrawal_begin(
                client_id=ctx.idempotency_key,
                exchange=acct.exchange,
                account=acct.name,
                coin=ctx.asset,
                network=plan["network_id"],
                address=plan["address"],
                amount=plan["amount"],
                request_id=ctx.request_id,
                node_key=ctx.node_key,
            )
        except journal.AlreadyJournaled as exc:
            raise AmbiguousError(
                f"{exc}: not sent again, recovery asks the exchange",
                evidence={"client_id": ctx.idempotency_key, "journal_state": exc.row.state},
            ) from None
        if acct.kind == "upbit":
            self._wait_for_twins(row)
        try:
            withdrawal_id, waits = venue.withdraw(
                acct,
                coin=ctx.asset,
                amount=plan["amount"],
                address=plan["address"],
                network_id=plan["network_id"],
                client_id=ctx.idempotency_key,
                budget_seconds=_submit_budget(),
            )
        except DeterministicError as exc:
            journal.withdrawal_answered(row, state=journal.State.REFUSED, error=exc.message)
            raise
        except Exception as exc:
            journal.withdrawal_answered(
                row, state=journal.State.UNKNOWN, error=_scrubbed(acct, str(exc))
            )
            raise
        journal.withdrawal_answered(row, state=journal.State.ACCEPTED, withdrawal_id=withdrawal_id)
        return Submitted(
            withdrawal_id,
            done=True,
            detail={
                "withdrawal_id": withdrawal_id,
                "client_id": ctx.idempotency_key,
                "exchange": acct.exchange,
                "account": acct.name,
                "network_id": plan["network_id"],
                "address": plan["address"],
                "amount": plain(plan["amount"]),
                **({"rate_limit_waits": waits} if waits else {}),
            },
        )

    @staticmethod
    def _wait_for_twins(row: Any) -> None:
        """Two withdrawals of the same amount may both have passed ``prepare``'s check: the
        later journal row waits (bounded) while the earlier one is being sent; if the earlier
        one's outcome is unknown, the later is not sent at all (FAILED, nothing moved)."""
        deadline = time.monotonic() + _submit_budget()
        while (
            twin := journal.unresolved_twin(
                client_id=row.client_id,
                exchange=row.exchange,
                account=row.account,
                coin=row.coin,
                network=row.network,
                amount=row.amount,
                before=row,
            )
        ) is not None:
            if twin.state != journal.State.SENDING or time.monotonic() >= deadline:
                message = (
                    f"not sent: withdrawal {twin.client_id} of the same amount still has an "
                    "unknown outcome, and Upbit's history could not tell the two apart"
                )
                journal.withdrawal_answered(row, state=journal.State.REFUSED, error=message)
                raise DeterministicError(message, evidence={"twin": twin.client_id})
            time.sleep(0.2)

    def recover(self, ctx: ExecutionContext) -> Recovery:
        acct = _account(ctx.config.get("venue", ""), role="source")
        row = journal.journaled(ctx.idempotency_key) if ctx.idempotency_key else None
        base = {"client_id": ctx.idempotency_key, "exchange": acct.exchange}
        if row is None:
            # The worker stopped before journaling: the request was never sent.
            return Recovery(
                RecoveredOutcome.FAILED, detail={**base, "finding": "never sent (no journal row)"}
            )
        if row.withdrawal_id:
            return self._found(row, row.withdrawal_id, {**base, "finding": "journaled answer"})
        if row.state == journal.State.REFUSED:
            return Recovery(
                RecoveredOutcome.FAILED, detail={**base, "finding": "the exchange refused it"}
            )
        if acct.kind == "binance":
            found = venue.withdrawals_by_client_id(acct, row.coin, row.client_id)
            how = "found by client id"
        else:
            found = self._by_history(acct, row)
            how = "matched in the history (currency, network, amount, time)"
        if not found:
            visible_from = row.started_at + timedelta(seconds=acct.visibility_seconds)
            return Recovery(
                RecoveredOutcome.FAILED,
                detail={
                    **base,
                    "finding": "the exchange shows no such withdrawal",
                    "history_complete_after": visible_from.isoformat(),
                },
            )
        detail = {**base, "finding": how, "withdrawal": found[0].as_evidence()}
        if len(found) > 1:
            detail["attention"] = {
                "reason": "venue",
                "message": f"{len(found)} withdrawals carry client id {row.client_id}: "
                f"{', '.join(r.id for r in found)}",
            }
        return self._found(row, found[0].id, detail)

    @staticmethod
    def _found(row: Any, withdrawal_id: str, detail: dict[str, Any]) -> Recovery:
        if row.state != journal.State.FOUND or row.withdrawal_id != withdrawal_id:
            state = row.state if row.state == journal.State.ACCEPTED else journal.State.FOUND
            journal.withdrawal_answered(row, state=state, withdrawal_id=withdrawal_id)
        detail = {"withdrawal_id": withdrawal_id, **detail}
        return Recovery(RecoveredOutcome.COMPLETED, withdrawal_id, detail)

    @staticmethod
    def _by_history(acct: ExchangeAccount, row: Any) -> list[Record]:
        since = row.started_at.replace(microsecond=0) - HISTORY_SLACK
        taken = journal.claimed_ids(
            exchange=acct.exchange,
            account=acct.name,
            since=since - timedelta(days=1),
            client_id=row.client_id,
        )
        matches = [
            record
            for record in venue.recent_withdrawals(acct, row.coin)
            if record.coin == row.coin
            and record.network == row.network
            and record.amount == row.amount
            and record.created_at is not None
            and record.created_at >= since
            and record.id not in taken
        ]
        return sorted(matches, key=lambda record: record.created_at)[:1]


def _withdraw_node(ctx: ExecutionContext, key: str = "") -> tuple[str, Upstream]:
    if key and key in ctx.upstream:
        return key, ctx.upstream[key]
    for name, node in ctx.upstream.items():
        if node.executor == "cex_withdraw":
            return name, node
    raise DeterministicError(f"node {ctx.node_key}: no cex_withdraw node upstream")


def _sent(withdraw: Upstream, coin: str) -> tuple[ExchangeAccount, Record | None]:
    """The withdrawal a withdraw node made, as its exchange shows it now."""
    source = _account(withdraw.config.get("venue", ""), role="source")
    if not withdraw.external_ref:
        return source, None
    return source, venue.withdrawal_by_id(source, coin, withdraw.external_ref)


OBSERVED = {"completed": ObservedStatus.COMPLETED, "failed": ObservedStatus.FAILED}


@register("cex_withdrawal_observe", provider=PROVIDER)
class CexWithdrawalObserve(Executor):
    """Watch the exchange process a withdrawal until it has broadcast it (its txid known)."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        _, withdraw = _withdraw_node(ctx, ctx.config.get("source_node", ""))
        _, record = _sent(withdraw, ctx.asset)
        if record is None:
            return Observation(
                ObservedStatus.PENDING,
                detail={"withdrawal_id": withdraw.external_ref, "finding": "not in history yet"},
            )
        detail = {
            "withdrawal_id": record.id,
            "tx_hash": record.txid,
            "withdrawal": record.as_evidence(),
        }
        status = OBSERVED.get(record.status, ObservedStatus.PENDING)
        if status == ObservedStatus.COMPLETED and not record.txid:
            status = ObservedStatus.PENDING
        return Observation(status, record.txid or record.id, detail)


@register("cex_deposit_observe", provider=PROVIDER)
class CexDepositObserve(Executor):
    """Watch the deposit arrive at the destination exchange: a deposit counts only if its
    txid, asset, network, amount (what was asked less the network fee the source exchange
    took out of it) and address (where the exchange reports one) are all the withdrawal's."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        destination = _account(ctx.config.get("venue", ""), role="destination")
        network_id = _network_id(destination, str(ctx.config.get("network") or ""))
        withdraws = [(k, n) for k, n in ctx.upstream.items() if n.executor == "cex_withdraw"]
        if not withdraws:
            raise DeterministicError(f"node {ctx.node_key}: no cex_withdraw node upstream")
        credited: dict[str, Any] = {}
        hashes = []
        for key, withdraw in sorted(withdraws):
            expected = self._expected(ctx, key, withdraw, network_id)
            if expected is None:
                return Observation(
                    ObservedStatus.PENDING, detail={"waiting_for": f"{key} transaction"}
                )
            observation = self._deposit(ctx, destination, expected)
            if observation.status != ObservedStatus.COMPLETED:
                return observation
            credited[expected["txid"]] = observation.detail
            hashes.append(expected["txid"])
        if len(hashes) == 1:
            return Observation(ObservedStatus.COMPLETED, hashes[0], credited[hashes[0]])
        return Observation(ObservedStatus.COMPLETED, ",".join(hashes), {"deposits": credited})

    def _expected(
        self, ctx: ExecutionContext, key: str, withdraw: Upstream, network_id: str
    ) -> dict[str, Any] | None:
        """What the deposit of ``withdraw`` must look like (None while its txid is unknown)."""
        observer = next(
            (
                n
                for n in ctx.upstream.values()
                if n.executor == "cex_withdrawal_observe"
                and (n.config.get("source_node") or key) == key
                and n.result.get("tx_hash")
            ),
            None,
        )
        evidence = (observer.result.get("withdrawal") if observer else None) or {}
        if not evidence.get("txid"):
            source, record = _sent(withdraw, ctx.asset)
            if record is None or not record.txid:
                return None
            evidence, fee = record.as_evidence(), record.fee
        else:
            source = _account(withdraw.config.get("venue", ""), role="source")
            fee = Decimal(str(evidence.get("fee") or "0"))
        asked = Decimal(str(withdraw.result.get("amount") or ctx.amount))
        amount = asked - fee if source.fee_deducted else asked
        return {
            "txid": evidence["txid"],
            "coin": ctx.asset,
            "network": network_id,
            "amount": amount,
            "address": str(withdraw.result.get("address") or ""),
            "fee": fee,
        }

    def _deposit(
        self, ctx: ExecutionContext, destination: ExchangeAccount, expected: dict[str, Any]
    ) -> Observation:
        found = venue.deposits_by_txid(destination, expected["coin"], expected["txid"])
        wanted = {
            "txid": expected["txid"],
            "coin": expected["coin"],
            "network": expected["network"],
            "amount": str(expected["amount"]),
            "address": expected["address"],
            "source_fee": str(expected["fee"]),
        }
        matching = [r for r in found if not self._mismatches(r, expected)]
        if not matching:
            detail: dict[str, Any] = {"expected": wanted, "finding": "no deposit yet"}
            if found:
                detail["finding"] = "a deposit with this txid does not match the withdrawal"
                detail["mismatches"] = {r.id: self._mismatches(r, expected) for r in found}
                detail["deposits"] = [r.as_evidence() for r in found]
                differs = sorted(set().union(*detail["mismatches"].values()))
                detail["attention"] = {
                    "reason": "venue",
                    "message": f"{destination.name}: deposit {expected['txid']} differs from "
                    f"the withdrawal ({', '.join(differs)})",
                }
            return Observation(ObservedStatus.PENDING, expected["txid"], detail)
        record = matching[0]
        detail = {"deposit": record.as_evidence(), "expected": wanted}
        status = OBSERVED.get(record.status, ObservedStatus.PENDING)
        return Observation(status, expected["txid"], detail)

    @staticmethod
    def _mismatches(record: Record, expected: dict[str, Any]) -> list[str]:
        wrong = []
        if record.coin != expected["coin"]:
            wrong.append("asset")
        if record.network and record.network != expected["network"]:
            wrong.append("network")
        if record.amount != expected["amount"]:
            wrong.append("amount")
        if (
            record.address
            and expected["address"]
            and record.address.lower() != expected["address"].lower()
        ):
            wrong.append("address")
        return wrong
