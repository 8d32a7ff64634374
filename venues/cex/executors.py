"""The exchange lane's executors (``cex_withdraw``, ``cex_withdrawal_observe``,
``cex_deposit_observe``) against real exchanges through ccxt, registered under the provider
``venues``: ``QTG_VENUES`` (or ``QTG_EXECUTORS``) decides whether they or the sandbox serve the
templates. What each exchange can prove is its dialect's (``venues.cex.exchanges``).

Exactly once. The node attempt's idempotency key is the withdrawal's client id, and a journal
row (``CexWithdrawal``, state SENDING) is committed before anything is sent. The request
leaves only after the fence (``ExecutionContext.fence``): one database transaction proves
this worker still holds the node's lease and moves the row SENDING -> SENT. So a row still
SENDING was never sent, and recovery closes it (SENDING -> NOT_SENT, a compare-and-set the
fence of a stalled worker then loses): that, and only that, proves "never happened" at once.

A SENT row may still take effect for as long as the request lives: Binance's signed
``timestamp`` + ``recvWindow`` end at the fence's deadline, so once that has passed (plus
the measured clock skew) and the history has had its visibility window, "not found" is
proof. Upbit and Bithumb promise no such bound (``request_lifetime`` None): absence is never
proof there; the worker keeps the node UNKNOWN and, after the visibility window, asks a
person (``unprovable`` attention); a later sighting settles it too.

Recovery asks by client id where the exchange keeps one (Binance). Elsewhere it matches the
history by what the journal says was asked: currency, network, the exact amount, created no
earlier than the submit began (on the exchange's clock, with the measured skew and its
uncertainty as the margin), and not an id another journal row holds. Those records carry no
address, so ``prepare`` holds a withdrawal back (TransientError) while another of the same
(account, currency, network, amount) has an unknown outcome.
"""

import re
import time
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from movements.executors.base import (
    AmbiguousError,
    AmountRefused,
    DeterministicError,
    ExecutionContext,
    Executor,
    ExecutorError,
    LeaseLost,
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
from qtg.core.chains import family_of_address
from qtg.core.venues import is_chain_address
from venues.cex import clock, journal, ratelimit, venue
from venues.cex.client import secrets_of
from venues.cex.config import ExchangeAccount, account, is_account, plain
from venues.cex.errors import scrub
from venues.cex.exchanges.base import Validity
from venues.cex.records import Record

PROVIDER = "venues"
# What an exchange takes as a client withdrawal id (Binance: up to 100 of these characters).
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
# How old a clock measurement a submit may sign with (prepare measured it just before).
SUBMIT_SKEW_AGE_SECONDS = 600.0
# The smallest unit an amount is split into (an 18-decimal token's).
SPLIT_UNIT = Decimal("1e-18")


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


def _attention(message: str) -> dict[str, str]:
    return {"reason": "venue", "message": message[:900]}


def _validity_seconds(acct: ExchangeAccount) -> float | None:
    """How long a withdraw request is signed valid for (None: the exchange sets no bound)."""
    bound = acct.dialect.max_validity_seconds
    return None if bound is None else min(bound, acct.timeout_seconds)


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

    def call_timeout(self, ctx: ExecutionContext) -> float:
        try:
            return account(ctx.config.get("venue", "")).timeout_seconds
        except LookupError:
            return self.call_timeout_seconds

    def request_lifetime(self, ctx: ExecutionContext) -> float | None:
        """Binance: the signed validity (it ends at the fence's deadline) and the call's
        timeout, plus the measured clock skew; Upbit and Bithumb: no bound (None)."""
        try:
            acct = account(ctx.config.get("venue", ""))
        except LookupError:
            return None
        validity = _validity_seconds(acct)
        if validity is None:
            return None
        row = journal.journaled(ctx.idempotency_key) if ctx.idempotency_key else None
        skew_ms = abs(row.skew_ms or 0) if row is not None else 0
        margin = (skew_ms + acct.dialect.clock_resolution_ms + clock.MARGIN_MS) / 1000
        return validity + acct.timeout_seconds + margin

    def validate(self, spec: NodeSpec) -> None:
        for name in ("venue", "to", "network"):
            if not spec.config.get(name):
                raise DeterministicError(f"node {spec.node_key}: config lacks {name}")
        source = _account(spec.config["venue"], role="source")
        network_id = _network_id(source, spec.config["network"])
        destination = spec.config["to"]
        if not is_chain_address(destination) and not is_account(destination):
            raise DeterministicError(
                f"destination {destination!r} is neither a chain address nor a configured "
                "exchange account"
            )
        if not isinstance(spec.amount, Decimal) or spec.amount <= 0:
            raise DeterministicError(f"amount must be a positive decimal, got {spec.amount!r}")
        amount = _leg_amount(spec.amount, spec.config, spec.node_key)
        try:
            rules = venue.rules(source, spec.asset, network_id)
        except (ExecutorError, ImproperlyConfigured):
            # The exchange cannot be asked now, refuses the keys, or this process holds none
            # (a web process need not): prepare asks again, and refuses, before anything moves.
            return
        self._check_rules(source, spec.asset, network_id, amount, rules)

    @staticmethod
    def _check_rules(
        acct: ExchangeAccount, coin: str, network_id: str, amount: Decimal, rules: Any = None
    ) -> dict[str, Any]:
        """The exchange's precision and minimum for this withdrawal: refused, never rounded."""
        rules = rules or venue.rules(acct, coin, network_id)
        refusal = rules.refusal(amount, fee_deducted=acct.fee_deducted)
        if refusal:
            raise AmountRefused(
                f"{acct.exchange} {coin} on {network_id}: {refusal}",
                evidence={"exchange_rules": rules.as_evidence(), "amount": plain(amount)},
            )
        return rules.as_evidence()

    def _plan(self, ctx: ExecutionContext) -> dict[str, Any]:
        acct = _account(ctx.config.get("venue", ""), role="source")
        network = str(ctx.config.get("network") or "")
        network_id = _network_id(acct, network)
        amount = _leg_amount(ctx.amount, ctx.config, ctx.node_key)
        address = _destination_address(str(ctx.config.get("to") or ""), ctx.asset, network)
        evm = family_of_address(address)
        if (evm is None or evm.name != "evm") and network_id == "ETH":
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
        skew = venue.skew(acct)
        if abs(skew.offset_ms) + skew.uncertainty_ms > acct.max_skew_seconds * 1000:
            message = (
                f"{acct.name}: the exchange's clock is {skew.offset_ms / 1000:+.1f}s from ours "
                f"(±{skew.uncertainty_ms / 1000:.1f}s), more than the {acct.max_skew_seconds:g}s "
                "allowed: withdrawals wait until the clocks agree"
            )
            raise TransientError(
                message,
                evidence={**skew.as_evidence(), "attention": _attention(message)},
                retry_after=max(acct.visibility_seconds / 4, 1.0),
            )
        rules = self._check_rules(acct, ctx.asset, plan["network_id"], plan["amount"])
        checked = venue.preflight(acct, ctx.asset, plan["amount"])
        if not acct.dialect.client_ids:
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
                    f"{acct.exchange}'s history could not tell the two apart",
                    retry_after=acct.visibility_seconds / 4 or None,
                )
        return Prepared(
            {
                "exchange": acct.exchange,
                "account": acct.name,
                "network_id": plan["network_id"],
                "address": plan["address"],
                "amount": plain(plan["amount"]),
                "exchange_rules": rules,
                **skew.as_evidence(),
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
        if not acct.dialect.client_ids:
            self._wait_for_twins(row)
        try:
            # What prepare measured a moment ago (a submit asks nothing it need not).
            skew = venue.skew(acct, phase="submit", refresh_seconds=SUBMIT_SKEW_AGE_SECONDS)
        except Exception as exc:
            journal.advance(row, to=journal.State.NOT_SENT, error=_scrubbed(acct, str(exc)))
            raise
        validity_seconds = _validity_seconds(acct)
        timeout = validity_seconds if validity_seconds is not None else acct.timeout_seconds

        def fence(exchange: Any) -> Validity | None:
            def then() -> None:
                valid_until = None
                if validity_seconds is not None:
                    valid_until = timezone.now() + timedelta(seconds=validity_seconds)
                if not journal.mark_sent(row, valid_until=valid_until, skew_ms=skew.offset_ms):
                    raise journal.NotSendable(row)

            deadline = ctx.fence(timeout, then=then)
            if validity_seconds is None:
                return None
            window_ms = int((deadline - timezone.now()).total_seconds() * 1000)
            return Validity(timestamp_ms=clock.exchange_ms(skew), window_ms=max(window_ms, 1))

        try:
            answer, waits = venue.withdraw(
                acct,
                coin=ctx.asset,
                amount=plan["amount"],
                address=plan["address"],
                network_id=plan["network_id"],
                client_id=ctx.idempotency_key,
                budget_seconds=_submit_budget(),
                fence=fence,
            )
        except (LeaseLost, journal.NotSendable) as exc:
            # Nothing left: the lease is someone else's now, or recovery closed the row.
            journal.advance(row, to=journal.State.NOT_SENT, error=f"not sent: {exc}")
            raise AmbiguousError(
                f"withdrawal {row.client_id} not sent: {exc}",
                evidence={"client_id": row.client_id, "journal_state": row.state},
            ) from None
        except DeterministicError as exc:
            journal.advance(row, to=journal.State.REFUSED, error=exc.message)
            raise
        except Exception as exc:
            journal.advance(row, to=journal.State.UNKNOWN, error=_scrubbed(acct, str(exc)))
            raise
        withdrawal_id = acct.dialect.withdrawal_id(answer)
        answered = _scrubbed(acct, str(answer))[:300]
        if not withdrawal_id:
            message = f"{acct.exchange} accepted withdrawal {row.client_id} without naming its id"
            journal.advance(row, to=journal.State.UNKNOWN, error=f"{message}: {answered}")
            raise AmbiguousError(
                f"{message}: recovery looks for it",
                evidence={"client_id": row.client_id, "answer": answered},
            )
        try:
            journal.advance(row, to=journal.State.ACCEPTED, withdrawal_id=withdrawal_id)
        except journal.IdTaken as exc:
            message = (
                f"{acct.exchange} answered withdrawal {row.client_id} with id {withdrawal_id}, "
                f"which {exc}: the answer proves nothing about this withdrawal"
            )
            journal.advance(row, to=journal.State.UNKNOWN, error=message)
            raise AmbiguousError(
                message,
                evidence={
                    "client_id": row.client_id,
                    "answered_id": withdrawal_id,
                    "attention": _attention(message),
                },
            ) from None
        if row.withdrawal_id != withdrawal_id:
            message = (
                f"{acct.exchange} answered withdrawal {row.client_id} with id {withdrawal_id}, "
                f"but the journal already holds {row.withdrawal_id or 'no id'} ({row.state})"
            )
            raise AmbiguousError(
                message, evidence={"client_id": row.client_id, "attention": _attention(message)}
            )
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
                **skew.as_evidence(),
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
            if twin.state not in journal.IN_FLIGHT or time.monotonic() >= deadline:
                message = (
                    f"not sent: withdrawal {twin.client_id} of the same amount still has an "
                    f"unknown outcome, and {row.exchange}'s history could not tell the two apart"
                )
                journal.advance(row, to=journal.State.REFUSED, error=message)
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
        if row.state == journal.State.SENDING and journal.advance(
            row, to=journal.State.NOT_SENT, error="closed by recovery before the fence let it go"
        ):
            return Recovery(
                RecoveredOutcome.FAILED,
                detail={**base, "finding": "never sent (closed before the fence let it go)"},
            )
        if row.withdrawal_id:
            return self._found(acct, row, row.withdrawal_id, {**base, "finding": "journaled"})
        if row.state in (journal.State.REFUSED, journal.State.NOT_SENT):
            finding = "the exchange refused it" if row.state == "REFUSED" else "never sent"
            return Recovery(RecoveredOutcome.FAILED, detail={**base, "finding": finding})
        skew = self._skew_of(acct, row)
        if acct.dialect.client_ids:
            found = venue.withdrawals_by_client_id(acct, row.coin, row.client_id)
            how = "found by client id"
        else:
            found = self._by_history(acct, row, skew)
            how = "matched in the history (currency, network, amount, time)"
        if not found:
            return self._absent(acct, row, skew, base)
        detail = {"finding": how, "withdrawal": found[0].as_evidence(), **base}
        if len(found) > 1:
            detail["attention"] = _attention(
                f"{len(found)} withdrawals carry client id {row.client_id}: "
                f"{', '.join(r.id for r in found)}"
            )
        return self._found(acct, row, found[0].id, detail)

    @staticmethod
    def _skew_of(acct: ExchangeAccount, row: Any) -> clock.Skew:
        """The skew measured when the row was sent, else now."""
        try:
            now = venue.skew(acct, phase="recover")
        except TransientError:
            if row.skew_ms is None:
                raise
            now = clock.Skew(row.skew_ms, acct.dialect.clock_resolution_ms)
        if row.skew_ms is None:
            return now
        # Both measurements are evidence: the window covers either.
        spread = abs(now.offset_ms - row.skew_ms)
        return clock.Skew(row.skew_ms, now.uncertainty_ms + spread)

    @staticmethod
    def _absent(
        acct: ExchangeAccount, row: Any, skew: clock.Skew, base: dict[str, Any]
    ) -> Recovery:
        """The exchange shows no such withdrawal. Where the request had a bound (Binance), that
        is proof once the bound, the skew and the visibility window have all passed (the
        worker's own rules come on top); until then it is no answer. Where it had none
        (Upbit, Bithumb), absence is never proof: NOT_FOUND, which the worker keeps UNKNOWN,
        with a person asked once the visibility window has passed."""
        now = timezone.now()
        visibility = timedelta(seconds=acct.visibility_seconds)
        detail = {**base, "finding": "the exchange shows no such withdrawal", **skew.as_evidence()}
        if row.valid_until is None:
            detail["request_bound"] = f"none: {acct.exchange} enforces no validity on requests"
            return Recovery(RecoveredOutcome.NOT_FOUND, detail=detail)
        proven_at = row.valid_until + skew.window + visibility
        detail["proof_after"] = proven_at.isoformat()
        if now < proven_at:
            detail["finding"] += " yet (the request may still take effect or show)"
            return Recovery(RecoveredOutcome.UNRESOLVED, detail=detail)
        journal.advance(row, to=journal.State.NOT_FOUND, error=detail["finding"])
        return Recovery(RecoveredOutcome.NOT_FOUND, detail=detail)

    @staticmethod
    def _found(
        acct: ExchangeAccount, row: Any, withdrawal_id: str, detail: dict[str, Any]
    ) -> Recovery:
        if row.withdrawal_id and row.withdrawal_id != withdrawal_id:
            message = (
                f"{acct.exchange} shows withdrawal {withdrawal_id} for {row.client_id}, but the "
                f"journal holds {row.withdrawal_id}"
            )
            return Recovery(
                RecoveredOutcome.UNRESOLVED, detail={**detail, "attention": _attention(message)}
            )
        if not row.withdrawal_id:
            try:
                journal.advance(row, to=journal.State.FOUND, withdrawal_id=withdrawal_id)
            except journal.IdTaken as exc:
                message = f"{acct.exchange} names withdrawal {withdrawal_id}, which {exc}"
                return Recovery(
                    RecoveredOutcome.UNRESOLVED,
                    detail={**detail, "attention": _attention(message)},
                )
            if row.withdrawal_id != withdrawal_id:
                return Recovery(RecoveredOutcome.UNRESOLVED, detail=detail)
        detail = {"withdrawal_id": withdrawal_id, **detail}
        return Recovery(RecoveredOutcome.COMPLETED, withdrawal_id, detail)

    @staticmethod
    def _by_history(acct: ExchangeAccount, row: Any, skew: clock.Skew) -> list[Record]:
        """Records of what the row asked for, created (on the exchange's clock) no earlier
        than the submit began, less the measurement's uncertainty and a margin, and not
        already another row's."""
        slack = timedelta(milliseconds=skew.uncertainty_ms + clock.MARGIN_MS)
        since = row.started_at + timedelta(milliseconds=skew.offset_ms) - slack
        # Records are stamped to the second: a withdrawal created in the second counts.
        since = since.replace(microsecond=0)
        taken = journal.claimed_ids(
            exchange=acct.exchange,
            account=acct.name,
            since=row.started_at - timedelta(days=1),
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
            if isinstance(expected, Observation):
                return expected
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
    ) -> dict[str, Any] | Observation | None:
        """What the deposit of ``withdraw`` must look like (None while its txid is unknown),
        from the withdrawal as its exchange shows it now: re-read at every poll until the
        deposit is counted, so a withdrawal the exchange reported done and then failed (or
        refunded, or cancelled) is seen (an Observation asking a person to look)."""
        source, record = _sent(withdraw, ctx.asset)
        if record is not None and record.status == "failed":
            message = (
                f"withdrawal {record.id} ({withdraw.config.get('venue')}) is "
                f"{record.raw_status or record.status} at the exchange"
                + (f" after it was broadcast as {record.txid}" if record.txid else "")
                + ": the deposit will not come; the reservation stays held until a person "
                "settles this movement"
            )
            return Observation(
                ObservedStatus.PENDING,
                record.txid or record.id,
                {
                    "withdrawal": record.as_evidence(),
                    "finding": "the withdrawal failed at the exchange",
                    "attention": _attention(message),
                },
            )
        if record is None or not record.txid:
            return None
        row = journal.journaled(str(withdraw.result.get("client_id") or ""))
        # What went on the wire is the journal's exact amount (never rounded).
        asked = (
            row.amount
            if row is not None
            else Decimal(str(withdraw.result.get("amount") or ctx.amount))
        )
        amount = asked - record.fee if source.fee_deducted else asked
        return {
            "txid": record.txid,
            "coin": ctx.asset,
            "network": network_id,
            "amount": amount,
            "address": str(withdraw.result.get("address") or ""),
            "fee": record.fee,
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
                detail["attention"] = _attention(
                    f"{destination.name}: deposit {expected['txid']} differs from "
                    f"the withdrawal ({', '.join(differs)})"
                )
            return Observation(ObservedStatus.PENDING, expected["txid"], detail)
        record = matching[0]
        detail = {"deposit": record.as_evidence(), "expected": wanted}
        status = OBSERVED.get(record.status, ObservedStatus.PENDING)
        if status == ObservedStatus.COMPLETED:
            claim = journal.claim_deposit(
                account=destination.name,
                txid=record.txid,
                deposit_id=record.id,
                request_id=ctx.request_id,
                node_key=ctx.node_key,
            )
            if (claim.request_id, claim.node_key) != (ctx.request_id, ctx.node_key):
                detail["finding"] = "the deposit is already counted for another movement"
                detail["attention"] = _attention(
                    f"{destination.name}: deposit {record.txid} is already counted for "
                    f"movement {claim.request_id} ({claim.node_key}): not counted twice"
                )
                return Observation(ObservedStatus.PENDING, expected["txid"], detail)
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
