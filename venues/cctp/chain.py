"""What the CCTP executors read from the chains themselves: the burn's receipt and whether it is
still canonical, the message it emitted, and on the destination whether a message's nonce was
used (and by which transaction)."""

from __future__ import annotations

from dataclasses import dataclass

from eth_abi import decode as abi_decode
from eth_utils import keccak

from movements.executors.base import ExecutionContext, TransientError
from venues.cctp.config import CctpChain, to_units
from venues.cctp.message import Message, address_to_bytes32, nonce_key
from venues.ethlib import Web3
from venues.evm import client
from venues.evm.config import evm_chain
from venues.evm.endpoints import Sighting, sighting_elsewhere

MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()
MESSAGE_RECEIVED_TOPIC = (
    "0x" + keccak(text="MessageReceived(address,uint32,uint64,bytes32,bytes)").hex()
)
USED_NONCES_ABI = [
    {
        "name": "usedNonces",
        "type": "function",
        "stateMutability": "view",
        "inputs": [{"name": "", "type": "bytes32"}],
        "outputs": [{"name": "", "type": "uint256"}],
    }
]


def web3_for(chain: CctpChain) -> Web3:
    """The EVM adapter's client of the chain (its RPC URL from the named variable)."""
    return client.web3_for(evm_chain(chain.name))


def _rpc(chain: CctpChain, method: str, *params: object) -> object:
    try:
        response = web3_for(chain).provider.make_request(method, list(params))
    except Exception as exc:  # a transport error: the node may answer later
        raise TransientError(
            f"{chain.name} RPC unreachable: {type(exc).__name__}: {exc}",
            evidence={"chain": chain.name, "method": method},
        ) from exc
    if response.get("error"):
        raise TransientError(
            f"{chain.name} {method}: {response['error']}", evidence={"chain": chain.name}
        )
    return response.get("result")


@dataclass(frozen=True)
class BurnOnChain:
    tx_hash: str
    block_number: int
    block_hash: str
    sender: str
    messages: tuple[bytes, ...]


def burn_on_chain(chain: CctpChain, tx_hash: str) -> BurnOnChain | None:
    """The burn transaction as the canonical chain holds it now; None when it has no receipt or
    its block is no longer the canonical block at that height (a reorg removed it)."""
    receipt = _rpc(chain, "eth_getTransactionReceipt", tx_hash)
    if not receipt or int(receipt.get("status") or "0x0", 16) != 1:
        return None
    number = int(receipt["blockNumber"], 16)
    block = _rpc(chain, "eth_getBlockByNumber", hex(number), False)
    if not block or block.get("hash", "").lower() != receipt["blockHash"].lower():
        return None
    transmitter = chain.message_transmitter.lower()
    messages = tuple(
        bytes(abi_decode(["bytes"], bytes.fromhex(log["data"][2:]))[0])
        for log in receipt["logs"]
        if log["address"].lower() == transmitter
        and log["topics"]
        and log["topics"][0].lower() == MESSAGE_SENT_TOPIC
    )
    return BurnOnChain(
        tx_hash, number, receipt["blockHash"], Web3.to_checksum_address(receipt["from"]), messages
    )


def burn_still_seen(chain: CctpChain, tx_hash: str) -> Sighting:
    """Asked before an attested burn that :func:`burn_on_chain` did not find is called gone (a
    reorg): every endpoint of the source chain, the primary again (one lookup of a lagging
    backend answers null for a receipt the others serve). Gone only when none serves it."""
    return sighting_elsewhere(evm_chain(chain.name), tx_hash)


def mismatch(ctx: ExecutionContext, source: CctpChain, burn: BurnOnChain, raw: bytes) -> str | None:
    """Why the attested message ``raw`` is not the one this movement's burn emitted (None when
    it is): it must be byte for byte a message of the burn transaction, from the source's
    messenger, burning the source's USDC, for exactly the movement's amount."""
    if raw not in burn.messages:
        return "the attested message is not the message the burn emitted"
    try:
        message = Message.parse(raw)
        body = message.burn
    except ValueError as exc:
        return f"the attested message is not a CCTP burn message: {exc}"
    if message.source_domain != source.domain:
        return f"the message comes from domain {message.source_domain}, not {source.domain}"
    if message.sender != address_to_bytes32(source.token_messenger):
        return "the message was not sent by the source chain's TokenMessenger"
    if body.burn_token != address_to_bytes32(source.usdc):
        return "the message burns another token than the source chain's USDC"
    if body.amount != to_units(ctx.amount):
        return f"the message moves {body.amount} units, the movement {to_units(ctx.amount)}"
    recipient = str(ctx.config.get("to") or ctx.destination)
    if Web3.is_address(recipient) and body.mint_recipient != address_to_bytes32(recipient):
        return "the message mints to another recipient than the movement's destination"
    return None


def nonce_used(chain: CctpChain, source_domain: int, nonce: int) -> bool:
    """Whether the destination's MessageTransmitter has used (minted) ``nonce`` of
    ``source_domain``."""
    contract = web3_for(chain).eth.contract(address=chain.message_transmitter, abi=USED_NONCES_ABI)
    try:
        return contract.functions.usedNonces(nonce_key(source_domain, nonce)).call() != 0
    except Exception as exc:
        raise TransientError(f"{chain.name}: usedNonces unreadable: {exc}") from exc


def receiving_transaction(chain: CctpChain, source_domain: int, nonce: int) -> str | None:
    """The transaction that received (minted) the message ``source_domain``/``nonce`` on the
    destination chain, from its ``MessageReceived`` log (nonce is indexed), looked for in the
    chain's last ``cctp.log_lookback_blocks`` blocks (RPC providers bound a log query's range;
    a mint is searched for soon after the burn was attested)."""
    head = int(str(_rpc(chain, "eth_blockNumber")), 16)
    logs = _rpc(
        chain,
        "eth_getLogs",
        {
            "address": chain.message_transmitter,
            "fromBlock": hex(max(0, head - chain.log_lookback_blocks)),
            "toBlock": hex(head),
            "topics": [MESSAGE_RECEIVED_TOPIC, None, "0x" + nonce.to_bytes(32, "big").hex()],
        },
    )
    for log in logs or []:
        domain, _, _ = abi_decode(["uint32", "bytes32", "bytes"], bytes.fromhex(log["data"][2:]))
        if domain == source_domain and not log.get("removed"):
            return str(log["transactionHash"])
    return None
