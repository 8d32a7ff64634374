"""The ``cctp`` template's executors on real chains (registered for provider ``venues``).

- ``cctp_burn``: ``depositForBurn`` on the source chain through the EVM machinery (a nonce from
  QTG's allocator, the account's Signer, the signed bytes stored before broadcast, the
  transaction's life in the chain-transaction table); the account's one-time allowance to the
  TokenMessenger first (``venues.cctp.allowance``). Completes at the source chain's finality:
  a reorg before that is seen by its observe (REORG -> UNKNOWN) and its recovery re-broadcasts
  the stored bytes.
- ``cctp_attestation_observe``: asks Iris for the attestation of the burn node's transaction
  (backoff and ``Retry-After`` through :class:`TransientError`), and completes only when the
  attested message is the one the burn emitted, moves exactly the node's amount to the node's
  recipient, and the burn is still in the source chain's canonical history.
- ``cctp_mint``: ``receiveMessage(message, attestation)`` on the destination chain, submitted
  once. The chain refuses a bad attestation already at the gas estimate (the revert reason is
  the node's evidence, nothing is sent); a retry or recovery after a lost response finds the
  stored transaction by its hash or, failing that, the message's nonce used on chain and the
  transaction that used it: never a second mint.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from eth_abi import encode as abi_encode

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    RecoveredOutcome,
    Recovery,
    TransientError,
    Upstream,
)
from movements.executors.registry import register
from venues.cctp import chain as cctp_chain_io
from venues.cctp.allowance import ensure_allowance, settle_allowances
from venues.cctp.calls import DEPOSIT_FOR_BURN, RECEIVE_MESSAGE
from venues.cctp.config import USDC_DECIMALS, CctpChain, cctp_chain, iris_url, to_units
from venues.cctp.iris import IrisClient, IrisMessage
from venues.cctp.message import Message, address_to_bytes32
from venues.evm import client, facts
from venues.evm.config import EvmChain, evm_chain
from venues.evm.endpoints import Sighting
from venues.evm.tx import ChainAction, ContractCall, Track

PROVIDER = "venues"


def _chain(name: str) -> CctpChain:
    try:
        return cctp_chain(name)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


def _upstream(ctx: ExecutionContext, *, executor: str, key: str = "") -> Upstream:
    if key and key in ctx.upstream:
        return ctx.upstream[key]
    for node in ctx.upstream.values():
        if node.executor == executor:
            return node
    raise DeterministicError(f"node {ctx.node_key}: no upstream {key or executor} in the plan")


def validate_amount(spec: NodeSpec) -> None:
    if not isinstance(spec.amount, Decimal) or spec.amount <= 0:
        raise DeterministicError(f"amount must be a positive decimal, got {spec.amount!r}")
    if spec.asset != "USDC":
        raise DeterministicError(f"CCTP moves USDC only, not {spec.asset}")
    try:
        to_units(spec.amount)
    except ValueError as exc:
        raise DeterministicError(str(exc)) from None


def _usdc(units: int) -> str:
    return format(Decimal(units).scaleb(-USDC_DECIMALS).normalize(), "f")


def check_burn_facts(source: EvmChain, usdc: str, messenger: str, units: int) -> None:
    """Read from the source chain before a burn is planned or sent: USDC's ``decimals()``
    (CCTP amounts are 6-decimal) and the TokenMinter's per-message burn limit, which the
    amount may not pass (the burn would revert at its gas estimate, after the allowance)."""
    w3 = client.web3_for(source)
    found = facts.token_decimals(w3, usdc)
    if found != USDC_DECIMALS:
        raise DeterministicError(
            f"USDC on {source.name}: the token contract {usdc} has {found} decimals, "
            f"CCTP moves {USDC_DECIMALS}-decimal USDC; refused"
        )
    limit = facts.burn_limit(w3, messenger, usdc)
    if units > limit:
        raise DeterministicError(
            f"{_usdc(units)} USDC is above the per-message burn limit "
            f"of {_usdc(limit)} USDC on {source.name} "
            "(TokenMinter.burnLimitsPerMessage): split the movement"
        )


def burn_seen_again(tx_hash: str, detail: dict[str, Any], asked: Sighting) -> Observation:
    """A look missed the burn, another endpoint (or a second look) serves it: no conclusion,
    and no mint either until a look finds it whole."""
    return Observation(
        ObservedStatus.PENDING,
        tx_hash,
        {**detail, "waiting_for": "the burn's receipt", **asked.evidence()},
    )


@register("cctp_attestation_observe", provider=PROVIDER)
class CctpAttestationObserve(Executor):
    """Wait for Circle's attestation of the burn; complete only on a canonical, matching burn."""

    external_ref_name = "burn transaction hash"

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        _chain(str(spec.config.get("chain") or ""))

    def observe(self, ctx: ExecutionContext) -> Observation:
        source = _chain(str(ctx.config.get("chain") or ""))
        burn = _upstream(ctx, executor="cctp_burn", key=str(ctx.config.get("source_node") or ""))
        tx_hash = burn.external_ref
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "burn"})
        detail: dict[str, Any] = {"burn_tx_hash": tx_hash, "source_domain": source.domain}
        with IrisClient(iris_url(), shared_bucket=True) as iris:
            messages = iris.messages(source.domain, tx_hash)
        if not messages:
            return Observation(
                ObservedStatus.PENDING, tx_hash, {**detail, "iris_status": "not_found"}
            )
        if len(messages) != 1:
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {
                    **detail,
                    "finding": f"the burn emitted {len(messages)} CCTP messages, not one",
                    "attention": {
                        "reason": "venue",
                        "message": "the burn transaction carries several CCTP messages",
                    },
                },
            )
        (found,) = messages
        if not found.complete:
            return Observation(ObservedStatus.PENDING, tx_hash, {**detail, **found.as_detail()})
        return self._attested(ctx, source, tx_hash, found, detail)

    def _attested(
        self,
        ctx: ExecutionContext,
        source: CctpChain,
        tx_hash: str,
        found: IrisMessage,
        detail: dict[str, Any],
    ) -> Observation:
        detail = {**detail, **found.as_detail()}
        burn = cctp_chain_io.burn_on_chain(source, tx_hash)
        if burn is None:
            asked = cctp_chain_io.burn_still_seen(source, tx_hash)
            if asked.seen is not None:
                return burn_seen_again(tx_hash, detail, asked)
            # Attested, yet the chain no longer has the burn: a reorg deeper than the
            # attester's confirmations. Minting on it would mint money that was never burned.
            return Observation(
                ObservedStatus.REORG,
                tx_hash,
                {
                    **detail,
                    **asked.evidence(),
                    "finding": "attested, but the burn is not in the canonical chain",
                    "attention": {
                        "reason": "reorg",
                        "message": f"the burn {tx_hash} left the canonical chain after Iris "
                        "attested it: no mint until it is back",
                    },
                },
            )
        detail |= {"burn_block_number": burn.block_number, "burn_block_hash": burn.block_hash}
        problem = cctp_chain_io.mismatch(ctx, source, burn, found.message)
        if problem:
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {
                    **detail,
                    "finding": problem,
                    "attention": {"reason": "venue", "message": problem},
                },
            )
        return Observation(ObservedStatus.COMPLETED, tx_hash, detail)


# --- on-chain actions -------------------------------------------------------------------------


def _evm(name: str) -> EvmChain:
    try:
        return evm_chain(name)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


def _account(chain: EvmChain, name: str) -> tuple[str, str]:
    """(account name, address) of a configured account that has a key."""
    try:
        account = chain.account(name)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None
    if not account.key:
        raise DeterministicError(f"account {name} of chain {chain.name} names no key")
    return account.name, account.address


def _address(chain: EvmChain, name_or_address: str) -> str:
    try:
        return chain.address_of(name_or_address)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


@dataclass(frozen=True)
class CctpContracts:
    """Which of a chain's CCTP contracts the burn and the mint call (V1's or V2's): the
    deployment's lookup and the names of its messenger and transmitter fields."""

    deployment: Callable[[str], CctpChain]
    messenger_field: str
    transmitter_field: str

    def messenger(self, cctp: CctpChain) -> str:
        return getattr(cctp, self.messenger_field)

    def transmitter(self, cctp: CctpChain) -> str:
        return getattr(cctp, self.transmitter_field)


V1_CONTRACTS = CctpContracts(_chain, "token_messenger", "message_transmitter")


@register("cctp_burn", provider=PROVIDER)
class CctpBurn(ChainAction):
    needs_upstream = False
    contracts = V1_CONTRACTS

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        source = _evm(str(spec.config.get("chain") or ""))
        destination = _evm(str(spec.config.get("destination_chain") or ""))
        source_cctp = self.contracts.deployment(source.name)
        destination_cctp = self.contracts.deployment(destination.name)
        _account(source, str(spec.config.get("from") or spec.source))
        _address(destination, str(spec.config.get("to") or spec.destination))
        units = to_units(spec.amount)
        self.validate_terms(spec.config)
        # A chain (or an Iris) that does not answer now is asked again before anything is sent.
        messenger = self.contracts.messenger(source_cctp)
        with suppress(TransientError):
            check_burn_facts(source, source_cctp.usdc, messenger, units)
        with suppress(TransientError):
            self.quote(source_cctp, destination_cctp, spec.config, units)

    def validate_terms(self, config: dict[str, Any]) -> None:
        """The burn's own terms in the node's config (V1 has none)."""

    def quote(
        self, source: CctpChain, destination: CctpChain, config: dict[str, Any], units: int
    ) -> dict[str, Any]:
        """What the burn will cost, refused when it is more than the node allows (V1: free)."""
        return {}

    def deposit_for_burn(
        self, ctx: ExecutionContext, *, units: int, domain: int, mint_recipient: bytes, usdc: str
    ) -> bytes:
        """The calldata of the burn: V1 ``depositForBurn(amount, destinationDomain,
        mintRecipient, burnToken)``."""
        return DEPOSIT_FOR_BURN + abi_encode(
            ["uint256", "uint32", "bytes32", "address"], [units, domain, mint_recipient, usdc]
        )

    def call(self, ctx: ExecutionContext) -> ContractCall:
        """The burn on the source chain, V1 or V2 alike: only the calldata and the messenger
        differ (:meth:`deposit_for_burn`, ``contracts``)."""
        source = _evm(str(ctx.config.get("chain") or ""))
        cctp = self.contracts.deployment(source.name)
        destination = _evm(str(ctx.config.get("destination_chain") or ""))
        account, sender = _account(source, str(ctx.config.get("from") or ctx.source))
        recipient = _address(destination, str(ctx.config.get("to") or ctx.destination))
        units = to_units(ctx.amount)
        data = self.deposit_for_burn(
            ctx,
            units=units,
            domain=self.contracts.deployment(destination.name).domain,
            mint_recipient=address_to_bytes32(recipient),
            usdc=cctp.usdc,
        )
        return ContractCall(
            chain=source,
            sender=sender,
            account_name=account,
            recipient=self.contracts.messenger(cctp),
            symbol="USDC",
            units=units,
            token=cctp.usdc,
            data="0x" + data.hex(),
        )

    def before_first_nonce(self, ctx: ExecutionContext, call: ContractCall) -> dict[str, Any]:
        cctp = self.contracts.deployment(call.chain.name)
        destination = self.contracts.deployment(str(ctx.config.get("destination_chain") or ""))
        messenger = self.contracts.messenger(cctp)
        check_burn_facts(call.chain, cctp.usdc, messenger, call.units)
        quote = self.quote(cctp, destination, ctx.config, call.units)
        allowance = ensure_allowance(ctx, call, usdc=cctp.usdc, spender=messenger, units=call.units)
        return {**allowance, **quote}

    def before_look(self, ctx: ExecutionContext, call: ContractCall) -> None:
        settle_allowances(call.chain, call.sender, call.token)


@register("cctp_mint", provider=PROVIDER)
class CctpMint(ChainAction):
    """``receiveMessage`` with the attested message. Completes, like the burn, at the
    destination's finality (a reorg before it finds the node open and re-broadcasts);
    ``mint_observe`` then confirms it from the chain."""

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        chain = _evm(str(spec.config.get("chain") or ""))
        _chain(chain.name)
        self._relayer(chain, spec.config, spec.source)

    @staticmethod
    def _relayer(chain: EvmChain, config: dict[str, Any], source: str) -> tuple[str, str]:
        """Who sends ``receiveMessage`` on the destination: ``relayer`` in the node's config,
        else the chain's ``cctp.relayer``, else its account named like the movement's source,
        else its only account with a key."""
        name = str(config.get("relayer") or "") or _chain(chain.name).relayer
        if not name and source in chain.accounts:
            name = source
        if not name:
            signing = [account.name for account in chain.accounts.values() if account.key]
            name = signing[0] if len(signing) == 1 else ""
        if not name:
            raise DeterministicError(
                f"chain {chain.name}: name the account that submits mints (cctp.relayer)"
            )
        return _account(chain, name)

    contracts = V1_CONTRACTS
    attestation_executor = "cctp_attestation_observe"

    def _attested(self, ctx: ExecutionContext) -> tuple[bytes, bytes]:
        result = _upstream(ctx, executor=self.attestation_executor).result
        message, attestation = result.get("message"), result.get("attestation")
        if not message or not attestation:
            raise DeterministicError("no attestation for the burn")
        return bytes.fromhex(message[2:]), bytes.fromhex(attestation[2:])

    def minted_units(self, ctx: ExecutionContext, message: bytes) -> int:
        """What the mint pays the recipient (V1: the whole amount)."""
        return to_units(ctx.amount)

    def call(self, ctx: ExecutionContext) -> ContractCall:
        """``receiveMessage(message, attestation)``, V1 or V2 alike (``contracts``)."""
        chain = _evm(str(ctx.config.get("chain") or ""))
        cctp = self.contracts.deployment(chain.name)
        account, sender = self._relayer(chain, ctx.config, ctx.source)
        message, attestation = self._attested(ctx)
        data = RECEIVE_MESSAGE + abi_encode(["bytes", "bytes"], [message, attestation])
        return ContractCall(
            chain=chain,
            sender=sender,
            account_name=account,
            recipient=self.contracts.transmitter(cctp),
            symbol="USDC",
            units=self.minted_units(ctx, message),
            token=self.contracts.transmitter(cctp),
            data="0x" + data.hex(),
        )

    def _already_minted(self, ctx: ExecutionContext) -> str | None:
        """The transaction that received the message, if its nonce is used on chain."""
        chain = _chain(str(ctx.config.get("chain") or ""))
        message = Message.parse(self._attested(ctx)[0])
        if not cctp_chain_io.nonce_used(chain, message.source_domain, message.nonce):
            return None
        found = cctp_chain_io.receiving_transaction(chain, message.source_domain, message.nonce)
        return found or "unknown"

    def before_first_nonce(self, ctx: ExecutionContext, call: ContractCall) -> dict[str, Any]:
        minted_by = self._already_minted(ctx)
        if minted_by:
            # Received already, by a transaction this node never sent (another relayer):
            # nothing to send, and not ours to call done without a person looking.
            raise DeterministicError(
                f"the message was already received on {call.chain.name} by {minted_by}",
                evidence={
                    "received_by": minted_by,
                    "attention": {
                        "reason": "venue",
                        "message": f"the burn was minted by {minted_by}, not by this node",
                    },
                },
            )
        return {}

    def checked(self, ctx: ExecutionContext, look: Track, observation: Observation) -> Observation:
        if observation.status == ObservedStatus.REORG:
            # A reorg within confirmations: ``track`` walked the mint back to PENDING and
            # re-sends its stored bytes (the message's nonce can be received once, so it
            # cannot mint twice). Nothing is unresolved: the node keeps observing, the reorg
            # is its evidence and an operator is told (not an UNKNOWN beside the completed
            # burn, which the table would turn into MANUAL_INTERVENTION).
            return Observation(
                ObservedStatus.PENDING,
                observation.external_ref,
                {**observation.detail, "walked_back": "reorg within confirmations"},
            )
        if observation.status not in (ObservedStatus.FAILED, ObservedStatus.UNKNOWN):
            return observation
        # Ours reverted or never landed: if the message was received all the same (another
        # relayer was first: "Nonce already used"), the mint happened, once, by that
        # transaction.
        minted_by = self._already_minted(ctx)
        if not minted_by or minted_by == "unknown":
            return observation
        return Observation(
            ObservedStatus.COMPLETED,
            minted_by,
            {
                **observation.detail,
                "finding": "the message was received by another transaction",
                "received_by": minted_by,
                "ours": observation.external_ref,
            },
            replaced=True,
        )

    def recover(self, ctx: ExecutionContext) -> Recovery:
        recovery = super().recover(ctx)
        if recovery.outcome in (RecoveredOutcome.COMPLETED, RecoveredOutcome.SUBMITTED):
            return recovery
        # Our transaction is not to be found (or failed): if the message's nonce is used
        # anyway, the mint happened; say by which transaction, never mint again.
        minted_by = self._already_minted(ctx)
        if minted_by:
            return Recovery(
                RecoveredOutcome.COMPLETED,
                minted_by if minted_by != "unknown" else ctx.external_ref,
                {
                    **recovery.detail,
                    "finding": "the message's nonce is used on chain",
                    "received_by": minted_by,
                },
            )
        return recovery
