"""The ``cctp_v2`` and ``cctp_v2_fast`` templates' executors: CCTP V2 on real chains, on the same
chain-action machinery as V1 (``venues.cctp.executors``).

- ``cctp_v2_burn``: TokenMessengerV2 ``depositForBurn(amount, destinationDomain, mintRecipient,
  burnToken, destinationCaller, maxFee, minFinalityThreshold)``, or ``depositForBurnWithHook``
  (the same and ``hookData``) when the node has ``hook_data`` (0x-hex, at most
  :data:`MAX_HOOK_DATA_BYTES`; anything else is refused at create as the caller's input, 400).
  At create (``validate``) the fee
  is quoted from Iris (``GET /v2/burn/USDC/fees/{src}/{dst}``) for the node's finality threshold
  and a quote above the node's ``max_fee`` refuses the movement; the per-message burn limit is
  read from the chain. The amount burned (what leaves the source, what is reserved) is the
  movement's amount; the recipient receives amount - fee. A standard burn completes at the
  source's finality (as V1); a fast burn (threshold 1000) completes once its block is at or
  below the source's ``safe`` block (Circle attests fast messages at "confirmed"): its
  transaction is watched on to finality by the attestation observe and ``burn_final``.
- ``cctp_v2_attestation_observe``: the attested V2 message checked byte for byte against the
  message the burn emitted (only the attester's fields may differ: nonce, finality executed,
  fee executed, expiration), and field by field: source domain and messenger, destination
  domain and messenger, USDC, amount, recipient, hookData, the node's ``minFinalityThreshold``, a
  finality executed at least what the template asks, a fee at most ``max_fee``; only while the
  burn is in the source's canonical chain. A burn that a reorg removed holds the node (the burn's
  stored bytes re-broadcast by its track; the attester's nonce is derived from the burn, so the
  re-included burn carries the same message: one mint). An expired attestation is re-attested
  (``POST /v2/reattest/{nonce}``).
- ``cctp_v2_mint``: MessageTransmitterV2 ``receiveMessage(message, attestation)``; recovery
  through ``usedNonces(nonce)`` of the attested message's nonce (the nonce is assigned by the
  attester, so it is read from the attested message, never at burn time).
- ``cctp_v2_burn_final_observe``: a fast transfer's burn watched to the source's finality after
  the mint (a reorg re-broadcasts the stored burn; the movement completes when it is final).
"""

from __future__ import annotations

import re
import time
from contextlib import suppress
from decimal import Decimal, InvalidOperation
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import keccak
from prometheus_client import Histogram

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    ParamRefused,
    TransientError,
)
from movements.executors.registry import register
from venues.cctp import chain as cctp_chain_io
from venues.cctp.calls import (
    BURN_ARGS_V2,
    DEPOSIT_FOR_BURN_V2,
    DEPOSIT_FOR_BURN_WITH_HOOK,
)
from venues.cctp.config import CctpChain, iris_url, to_units
from venues.cctp.executors import (
    PROVIDER,
    CctpBurn,
    CctpContracts,
    CctpMint,
    _chain,
    _evm,
    _upstream,
    _usdc,
    burn_seen_again,
    validate_amount,
)
from venues.cctp.iris import IrisClient, IrisMessage, fee_units
from venues.cctp.message import address_to_bytes32
from venues.cctp.message_v2 import (
    FINALITY_THRESHOLD_CONFIRMED,
    FINALITY_THRESHOLD_FINALIZED,
    HOOK_DATA_INDEX,
    MESSAGE_BODY_INDEX,
    MessageV2,
)
from venues.evm import client
from venues.evm.tx import ContractCall, Track, track, transaction_by_hash
from venues.models import TxState

# Circle sets no bound on hookData; QTG's is what a reviewed hook needs, and keeps the burn's
# gas and the message (which the destination's hook executor reads) small.
MAX_HOOK_DATA_BYTES = 1024
_HOOK_HEX = re.compile(r"^0x(?:[0-9a-fA-F]{2})+$")
MESSAGE_RECEIVED_V2_TOPIC = (
    "0x" + keccak(text="MessageReceived(address,uint32,bytes32,bytes32,uint32,bytes)").hex()
)
USED_NONCES_ABI = cctp_chain_io.USED_NONCES_ABI

ATTESTATION_SECONDS = Histogram(
    "qtg_cctp_attestation_seconds",
    "Time from a CCTP burn's block to Circle's attestation of it being accepted by QTG, by "
    "CCTP version and finality threshold asked for.",
    ["version", "threshold"],
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600),
)


def _v2(name: str) -> CctpChain:
    chain = _chain(name)
    if not chain.has_v2:
        raise DeterministicError(
            f"chain {name} has no CCTP V2 configuration (cctp.token_messenger_v2, "
            "cctp.message_transmitter_v2)"
        )
    return chain


def _threshold(config: dict[str, Any]) -> int:
    try:
        value = int(config.get("finality_threshold") or FINALITY_THRESHOLD_FINALIZED)
    except (TypeError, ValueError):
        raise DeterministicError("finality_threshold must be 1000 or 2000") from None
    if value not in (FINALITY_THRESHOLD_CONFIRMED, FINALITY_THRESHOLD_FINALIZED):
        raise DeterministicError(f"finality_threshold must be 1000 or 2000, not {value}")
    return value


def _max_fee_units(config: dict[str, Any]) -> int:
    raw = config.get("max_fee")
    try:
        value = Decimal(str(raw if raw not in (None, "") else "0"))
        units = to_units(value)
    except (InvalidOperation, ValueError) as exc:
        raise DeterministicError(f"max_fee must be a USDC amount, not {raw!r}: {exc}") from None
    if units < 0:
        raise DeterministicError("max_fee may not be negative")
    return units


def hook_data(config: dict[str, Any]) -> bytes:
    """The node's ``hook_data`` (the request's param): bytes carried in the burn message for the
    destination's hook executor, empty for a burn without a hook."""
    raw = config.get("hook_data")
    if raw in (None, ""):
        return b""
    if not isinstance(raw, str) or not _HOOK_HEX.match(raw):
        raise ParamRefused(
            "hook_data must be bytes written as 0x followed by an even number of hex digits "
            f"(at least one byte), not {str(raw)[:40]!r}",
            param="hook_data",
        )
    data = bytes.fromhex(raw[2:])
    if len(data) > MAX_HOOK_DATA_BYTES:
        raise ParamRefused(
            f"hook_data is {len(data)} bytes; at most {MAX_HOOK_DATA_BYTES} are carried",
            param="hook_data",
        )
    return data


def _iris() -> IrisClient:
    return IrisClient(iris_url(), shared_bucket=True)


def quote_fee(source: CctpChain, destination: CctpChain, units: int, threshold: int) -> int:
    """The fee (USDC units) Iris quotes now for burning ``units`` at ``threshold``."""
    with _iris() as iris:
        schedule = iris.fee_bps(source.domain, destination.domain)
    if threshold not in schedule:
        raise DeterministicError(
            f"Iris quotes no fee for finality threshold {threshold} from domain "
            f"{source.domain} to {destination.domain}"
        )
    return fee_units(units, schedule[threshold])


def check_fee(source: CctpChain, destination: CctpChain, config: dict[str, Any], units: int):
    """The quote, refused when it is above the node's ``max_fee`` (or ``max_fee`` is not below
    the amount, which the chain refuses)."""
    threshold = _threshold(config)
    max_fee = _max_fee_units(config)
    if max_fee >= units:
        raise DeterministicError(
            f"max_fee {_usdc(max_fee)} USDC must be below the amount {_usdc(units)} USDC"
        )
    fee = quote_fee(source, destination, units, threshold)
    if fee > max_fee:
        raise DeterministicError(
            f"the fee Iris quotes for this transfer, {_usdc(fee)} USDC, is above its maxFee "
            f"of {_usdc(max_fee)} USDC: refused (raise max_fee or use the standard route)",
            evidence={"fee_quoted": _usdc(fee), "max_fee": _usdc(max_fee), "threshold": threshold},
        )
    return {
        "fee_quoted": _usdc(fee),
        "max_fee": _usdc(max_fee),
        "amount": _usdc(units),
        "amount_received": _usdc(units - fee),
        "finality_threshold": threshold,
    }


V2_CONTRACTS = CctpContracts(_v2, "token_messenger_v2", "message_transmitter_v2")


@register("cctp_v2_burn", provider=PROVIDER)
class CctpV2Burn(CctpBurn):
    needs_upstream = False
    contracts = V2_CONTRACTS

    def validate_terms(self, config: dict[str, Any]) -> None:
        _threshold(config)
        _max_fee_units(config)
        hook_data(config)

    def quote(
        self, source: CctpChain, destination: CctpChain, config: dict[str, Any], units: int
    ) -> dict[str, Any]:
        return check_fee(source, destination, config, units)

    def deposit_for_burn(
        self, ctx: ExecutionContext, *, units: int, domain: int, mint_recipient: bytes, usdc: str
    ) -> bytes:
        """TokenMessengerV2 ``depositForBurn(amount, destinationDomain, mintRecipient,
        burnToken, destinationCaller, maxFee, minFinalityThreshold)``, or, with ``hook_data``,
        ``depositForBurnWithHook(..., minFinalityThreshold, hookData)`` (the hookData is
        carried at the end of the burn message, from byte 228 of its body)."""
        args = [
            units,
            domain,
            mint_recipient,
            usdc,
            b"\0" * 32,  # destinationCaller: anyone may receive the message
            _max_fee_units(ctx.config),
            _threshold(ctx.config),
        ]
        hook = hook_data(ctx.config)
        if hook:
            return DEPOSIT_FOR_BURN_WITH_HOOK + abi_encode([*BURN_ARGS_V2, "bytes"], [*args, hook])
        return DEPOSIT_FOR_BURN_V2 + abi_encode(BURN_ARGS_V2, args)

    def checked(self, ctx: ExecutionContext, look: Track, observation: Observation) -> Observation:
        """A fast burn is done for the movement once its block is at or below the source's
        ``safe`` block: Circle attests it there. Its transaction is tracked on to finality."""
        if (
            observation.status != ObservedStatus.PENDING
            or _threshold(ctx.config) != FINALITY_THRESHOLD_CONFIRMED
            or look.reorg
            or look.winner is None
            or look.winner.state != TxState.CONFIRMED
            or look.winner.block_number is None
        ):
            return observation
        w3 = client.web3_for(look_chain(ctx))
        try:
            safe = w3.eth.get_block("safe")["number"]
        except Exception as exc:
            raise TransientError(f"safe block unreadable: {exc}") from exc
        if look.winner.block_number > safe:
            return observation
        return Observation(
            ObservedStatus.COMPLETED,
            look.winner.tx_hash,
            {**observation.detail, "completed_at": "safe", "safe_block": safe, "final": False},
        )


def look_chain(ctx: ExecutionContext):
    return _evm(str(ctx.config.get("chain") or ""))


# --- the attestation -------------------------------------------------------------------------


def as_emitted(raw: bytes) -> bytes:
    """``raw`` with the fields Circle's attester fills in zeroed again: the nonce, the
    finality executed and, of a burn body, the fee executed and the expiration block."""
    out = bytearray(raw)
    out[12:44] = b"\0" * 32
    out[144:148] = b"\0" * 4
    body = MESSAGE_BODY_INDEX
    if len(out) >= body + HOOK_DATA_INDEX:
        out[body + 164 : body + 228] = b"\0" * 64
    return bytes(out)


def burn_messages_v2(source: CctpChain, tx_hash: str) -> cctp_chain_io.BurnOnChain | None:
    """The burn as the canonical chain holds it, with the messages its V2 transmitter sent."""
    v2 = _v1_view(source)
    return cctp_chain_io.burn_on_chain(v2, tx_hash)


def _v1_view(cctp: CctpChain) -> CctpChain:
    from dataclasses import replace

    return replace(
        cctp,
        token_messenger=cctp.token_messenger_v2,
        message_transmitter=cctp.message_transmitter_v2,
    )


def mismatch_v2(
    ctx: ExecutionContext,
    source: CctpChain,
    destination: CctpChain,
    burn: cctp_chain_io.BurnOnChain,
    raw: bytes,
    burn_config: dict[str, Any],
) -> str | None:
    """Why the attested ``raw`` is not this movement's burn as Circle may attest it."""
    if as_emitted(raw) not in burn.messages:
        return "the attested message is not, byte for byte, the message the burn emitted"
    try:
        message = MessageV2.parse(raw)
        body = message.burn
    except ValueError as exc:
        return f"the attested message is not a CCTP V2 burn message: {exc}"
    units = to_units(ctx.amount)
    threshold = _threshold(burn_config)
    max_fee = _max_fee_units(burn_config)
    recipient = str(burn_config.get("to") or ctx.destination)
    problems = [
        (message.nonce == b"\0" * 32, "the attested message has no nonce"),
        (message.source_domain != source.domain, "the message comes from another domain"),
        (message.destination_domain != destination.domain, "the message goes to another domain"),
        (
            message.sender != address_to_bytes32(source.token_messenger_v2),
            "the message was not sent by the source chain's TokenMessengerV2",
        ),
        (
            message.recipient != address_to_bytes32(destination.token_messenger_v2),
            "the message is not for the destination chain's TokenMessengerV2",
        ),
        (body.burn_token != address_to_bytes32(source.usdc), "the message burns another token"),
        (body.amount != units, f"the message moves {body.amount} units, the movement {units}"),
        (
            client.Web3.is_address(recipient)
            and body.mint_recipient != address_to_bytes32(recipient),
            "the message mints to another recipient than the movement's destination",
        ),
        (
            message.min_finality_threshold != threshold,
            f"the message asks finality {message.min_finality_threshold}, the node {threshold}",
        ),
        (
            message.finality_threshold_executed < threshold,
            f"attested at finality {message.finality_threshold_executed}, below {threshold}",
        ),
        (body.max_fee != max_fee, "the message's maxFee is not the node's max_fee"),
        (
            body.hook_data != hook_data(burn_config),
            "the message's hookData is not, byte for byte, the burn node's hook_data",
        ),
        (
            body.fee_executed > max_fee,
            f"the fee executed {body.fee_executed} is above maxFee {max_fee}",
        ),
        (body.fee_executed >= units, "the fee executed is not below the amount"),
    ]
    for bad, why in problems:
        if bad:
            return why
    return None


def _burn_node_track(chain_name: str, tx_hash: str) -> Track | None:
    """One look at the burn node's transactions (moves them along: finalized, walked back
    and re-broadcast after a reorg); None when QTG has no such transaction."""
    tx = transaction_by_hash(chain_name, tx_hash)
    if tx is None or tx.node_id is None:
        return None
    return track(tx.node_id)


def _burn_missing(source: CctpChain, tx_hash: str, detail: dict[str, Any]) -> Observation:
    """The primary's look did not find the burn canonical. Held either way (nothing is minted
    on a burn that is not found whole); a person is told of a reorg only when no endpoint,
    the primary asked again among them, serves it."""
    asked = cctp_chain_io.burn_still_seen(source, tx_hash)
    if asked.seen is not None:
        return burn_seen_again(tx_hash, detail, asked)
    # Gone from the canonical chain (a reorg after a fast burn completed at `safe`): the
    # burn's track re-broadcasts its stored bytes, and the attester's nonce of the re-included
    # burn is the same.
    look = _burn_node_track(source.name, tx_hash)
    return Observation(
        ObservedStatus.PENDING,
        tx_hash,
        {
            **detail,
            "held": "the burn is not in the source's canonical chain",
            **asked.evidence(),
            "burn_track": look.status if look else "unknown",
            "attention": {
                "reason": "reorg",
                "message": f"the burn {tx_hash} left the canonical chain: no mint until it is back",
            },
        },
    )


@register("cctp_v2_attestation_observe", provider=PROVIDER)
class CctpV2AttestationObserve(Executor):
    """Circle's attestation of a V2 burn; complete only on a canonical burn whose attested
    message is, byte for byte, what it emitted, with a fee within its maxFee."""

    external_ref_name = "burn transaction hash"

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        _v2(str(spec.config.get("chain") or ""))

    def observe(self, ctx: ExecutionContext) -> Observation:
        source = _v2(str(ctx.config.get("chain") or ""))
        burn_node = _upstream(ctx, executor="cctp_v2_burn")
        destination = _v2(str(burn_node.config.get("destination_chain") or ""))
        tx_hash = burn_node.external_ref
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "burn"})
        detail: dict[str, Any] = {"burn_tx_hash": tx_hash, "source_domain": source.domain}
        burn = burn_messages_v2(source, tx_hash)
        if burn is None:
            return _burn_missing(source, tx_hash, detail)
        detail |= {"burn_block_number": burn.block_number, "burn_block_hash": burn.block_hash}
        with _iris() as iris:
            messages = iris.messages(source.domain, tx_hash)
        if not messages:
            return Observation(
                ObservedStatus.PENDING, tx_hash, {**detail, "iris_status": "not_found"}
            )
        if len(messages) != 1:
            problem = f"the burn emitted {len(messages)} CCTP messages, not one"
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {**detail, "finding": problem, "attention": _venue(problem)},
            )
        (found,) = messages
        detail |= _iris_detail(found)
        if not found.complete:
            return Observation(ObservedStatus.PENDING, tx_hash, detail)
        problem = mismatch_v2(ctx, source, destination, burn, found.message, burn_node.config)
        if problem:
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {**detail, "finding": problem, "attention": _venue(problem)},
            )
        message = MessageV2.parse(found.message)
        body = message.burn
        if body.expiration_block:
            head = client.web3_for(_evm(destination.name)).eth.block_number
            if body.expiration_block <= head + 1:
                with _iris() as iris:
                    iris.reattest("0x" + message.nonce.hex())
                return Observation(
                    ObservedStatus.PENDING,
                    tx_hash,
                    {**detail, "reattest": "the attestation expires before a mint can land"},
                )
        threshold = _threshold(burn_node.config)
        with suppress(Exception):
            block = client.web3_for(_evm(source.name)).eth.get_block(burn.block_number)
            ATTESTATION_SECONDS.labels("2", str(threshold)).observe(
                max(0.0, time.time() - float(block["timestamp"]))
            )
        return Observation(
            ObservedStatus.COMPLETED,
            tx_hash,
            {
                **detail,
                "nonce": "0x" + message.nonce.hex(),
                "finality_threshold_executed": message.finality_threshold_executed,
                "fee_executed": _usdc(body.fee_executed),
                "amount": _usdc(body.amount),
                "amount_received": _usdc(body.amount - body.fee_executed),
            },
        )


def _venue(problem: str) -> dict[str, str]:
    return {"reason": "venue", "message": problem}


def _iris_detail(found: IrisMessage) -> dict[str, Any]:
    detail = found.as_detail()
    if found.raw and found.raw.get("delayReason"):
        detail["delay_reason"] = found.raw["delayReason"]
    return detail


# --- the mint --------------------------------------------------------------------------------


def nonce_used_v2(chain: CctpChain, nonce: bytes) -> bool:
    w3 = cctp_chain_io.web3_for(chain)
    contract = w3.eth.contract(address=chain.message_transmitter_v2, abi=USED_NONCES_ABI)
    try:
        return contract.functions.usedNonces(nonce).call() != 0
    except Exception as exc:
        raise TransientError(f"{chain.name}: usedNonces unreadable: {exc}") from exc


def receiving_transaction_v2(chain: CctpChain, source_domain: int, nonce: bytes) -> str | None:
    """The transaction whose ``MessageReceived`` (nonce indexed) received the message."""
    head = int(str(cctp_chain_io._rpc(chain, "eth_blockNumber")), 16)
    logs = cctp_chain_io._rpc(
        chain,
        "eth_getLogs",
        {
            "address": chain.message_transmitter_v2,
            "fromBlock": hex(max(0, head - chain.log_lookback_blocks)),
            "toBlock": hex(head),
            "topics": [MESSAGE_RECEIVED_V2_TOPIC, None, "0x" + nonce.hex()],
        },
    )
    for log in logs or []:
        domain, _, _ = abi_decode(["uint32", "bytes32", "bytes"], bytes.fromhex(log["data"][2:]))
        if domain == source_domain and not log.get("removed"):
            return str(log["transactionHash"])
    return None


@register("cctp_v2_mint", provider=PROVIDER)
class CctpV2Mint(CctpMint):
    """``receiveMessage`` on MessageTransmitterV2 with the attested message."""

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        chain = _evm(str(spec.config.get("chain") or ""))
        _v2(chain.name)
        self._relayer(chain, spec.config, spec.source)

    contracts = V2_CONTRACTS
    attestation_executor = "cctp_v2_attestation_observe"

    def minted_units(self, ctx: ExecutionContext, message: bytes) -> int:
        """The amount less the fee the attester executed."""
        body = MessageV2.parse(message).burn
        return body.amount - body.fee_executed

    def before_first_nonce(self, ctx: ExecutionContext, call: ContractCall) -> dict[str, Any]:
        """Before anything is signed: the burn must still be in the source's canonical chain (a
        fast transfer is attested before the source finalizes; a reorg since then holds the
        mint, and the burn's stored bytes are re-broadcast by one look at its transactions)."""
        burn_node = _upstream(ctx, executor="cctp_v2_burn")
        source = _v2(str(burn_node.config.get("chain") or ""))
        if burn_messages_v2(source, burn_node.external_ref) is None:
            look = _burn_node_track(source.name, burn_node.external_ref)
            raise TransientError(
                f"the burn {burn_node.external_ref} is not in {source.name}'s canonical chain: "
                "the mint waits for it to be back",
                evidence={"burn_track": look.status if look else "unknown", "held": "mint"},
            )
        carried = MessageV2.parse(self._attested(ctx)[0]).burn.hook_data
        if carried != hook_data(burn_node.config):
            problem = "the attested message's hookData is not, byte for byte, the burn's hook_data"
            raise DeterministicError(
                problem,
                evidence={"hook_data_attested": "0x" + carried.hex(), "attention": _venue(problem)},
            )
        return super().before_first_nonce(ctx, call)

    def _already_minted(self, ctx: ExecutionContext) -> str | None:
        chain = _v2(str(ctx.config.get("chain") or ""))
        message = MessageV2.parse(self._attested(ctx)[0])
        if not nonce_used_v2(chain, message.nonce):
            return None
        found = receiving_transaction_v2(chain, message.source_domain, message.nonce)
        return found or "unknown"


@register("cctp_v2_burn_final_observe", provider=PROVIDER)
class CctpV2BurnFinalObserve(Executor):
    """A fast transfer's burn, watched to the source chain's finality after the mint."""

    external_ref_name = "burn transaction hash"

    def validate(self, spec: NodeSpec) -> None:
        _v2(str(spec.config.get("chain") or ""))

    def observe(self, ctx: ExecutionContext) -> Observation:
        source = _v2(str(ctx.config.get("chain") or ""))
        tx_hash = _upstream(ctx, executor="cctp_v2_burn").external_ref
        look = _burn_node_track(source.name, tx_hash)
        if look is None:
            raise DeterministicError(f"the burn {tx_hash} is not a transaction QTG signed")
        detail = {"burn_tx_hash": tx_hash, **look.summary()}
        if look.status == "finalized":
            return Observation(ObservedStatus.COMPLETED, tx_hash, detail)
        if look.status == "failed":
            return Observation(ObservedStatus.FAILED, tx_hash, detail)
        return Observation(ObservedStatus.PENDING, tx_hash, detail)
