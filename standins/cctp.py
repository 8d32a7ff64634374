"""The CCTP v1 stand-in on a devchain: deploy, link two chains, read messages, attest.

One :class:`CctpDomain` is one chain's MessageTransmitter + TokenMessenger + StandinUSDC.
:func:`link` makes two domains trust each other's messenger and map each other's USDC, so a
burn on one mints on the other once a message is attested. An attestation is what Circle's
attestation service (Iris) returns: the attester's 65-byte ECDSA signature (r || s || v, v in
{27, 28}) over keccak256(message), signed without the "Ethereum Signed Message" prefix.

The layouts (:class:`Message`, :class:`BurnMessage`) are Circle's CCTP v1 layouts; see
``standins/contracts/MessageTransmitter.sol`` and ``TokenMessenger.sol``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_utils import keccak
from web3 import Web3
from web3.contract import Contract
from web3.logs import DISCARD
from web3.types import TxReceipt

from standins.anvil import DevAccount
from standins.contracts import deploy, transact

MESSAGE_VERSION = 0
BURN_MESSAGE_VERSION = 0
MESSAGE_BODY_INDEX = 116
BURN_MESSAGE_LENGTH = 132


def address_to_bytes32(address: str) -> bytes:
    """An EVM address left-padded to 32 bytes, as CCTP writes senders and recipients."""
    return b"\0" * 12 + bytes.fromhex(Web3.to_checksum_address(address)[2:])


def bytes32_to_address(value: bytes) -> str:
    if len(value) != 32 or any(value[:12]):
        raise ValueError(f"not a left-padded address: 0x{value.hex()}")
    return Web3.to_checksum_address(value[12:])


def nonce_key(source_domain: int, nonce: int) -> bytes:
    """The key of ``MessageTransmitter.usedNonces`` for a message: keccak256(uint32 ‖ uint64)."""
    return keccak(struct.pack(">IQ", source_domain, nonce))


@dataclass(frozen=True)
class Message:
    """A CCTP v1 message: a 116-byte header then the body."""

    version: int
    source_domain: int
    destination_domain: int
    nonce: int
    sender: bytes  # bytes32
    recipient: bytes  # bytes32
    destination_caller: bytes  # bytes32; zero: anyone may receive it
    body: bytes

    @classmethod
    def parse(cls, raw: bytes) -> Message:
        raw = bytes(raw)
        if len(raw) < MESSAGE_BODY_INDEX:
            raise ValueError(f"CCTP message too short: {len(raw)} bytes")
        version, source, destination, nonce = struct.unpack(">IIIQ", raw[:20])
        return cls(
            version, source, destination, nonce, raw[20:52], raw[52:84], raw[84:116], raw[116:]
        )

    def encode(self) -> bytes:
        head = struct.pack(
            ">IIIQ", self.version, self.source_domain, self.destination_domain, self.nonce
        )
        return head + self.sender + self.recipient + self.destination_caller + self.body

    @property
    def burn(self) -> BurnMessage:
        return BurnMessage.parse(self.body)


@dataclass(frozen=True)
class BurnMessage:
    """The body of a TokenMessenger message: what was burned, for whom, how much."""

    version: int
    burn_token: bytes  # bytes32: the token's address on the source chain
    mint_recipient: bytes  # bytes32
    amount: int  # in the token's smallest unit
    message_sender: bytes  # bytes32: the depositor

    @classmethod
    def parse(cls, raw: bytes) -> BurnMessage:
        raw = bytes(raw)
        if len(raw) != BURN_MESSAGE_LENGTH:
            raise ValueError(f"burn message must be {BURN_MESSAGE_LENGTH} bytes, not {len(raw)}")
        (version,) = struct.unpack(">I", raw[:4])
        amount = int.from_bytes(raw[68:100], "big")
        return cls(version, raw[4:36], raw[36:68], amount, raw[100:132])

    def encode(self) -> bytes:
        return (
            struct.pack(">I", self.version)
            + self.burn_token
            + self.mint_recipient
            + self.amount.to_bytes(32, "big")
            + self.message_sender
        )


def sign_attestation(message: bytes, attester_key: str | bytes) -> bytes:
    """The attestation Iris would return for `message`: r ‖ s ‖ v over keccak256(message)."""
    signed = Account.unsafe_sign_hash(keccak(bytes(message)), attester_key)
    return bytes(signed.signature)


def messages_sent(transmitter: Contract, receipt: TxReceipt) -> list[bytes]:
    """The raw messages a transaction emitted through `transmitter` (``MessageSent``)."""
    events = transmitter.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    return [bytes(e["args"]["message"]) for e in events]


@dataclass
class CctpDomain:
    """CCTP on one chain: its domain id, contracts and the account that owns them."""

    w3: Web3
    domain: int
    owner: DevAccount
    transmitter: Contract
    messenger: Contract
    usdc: Contract

    def mint_usdc(self, to: str, amount: int) -> TxReceipt:
        """Test balance: the USDC owner mints `amount` (6-decimal units) to `to`."""
        return transact(self.w3, self.owner, self.usdc.functions.mint(to, amount))

    def set_burn_limit(self, amount: int) -> TxReceipt:
        """The most one ``depositForBurn`` of USDC may burn here (6-decimal units), as
        Circle's TokenController sets it."""
        call = self.messenger.functions.setMaxBurnAmountPerMessage(self.usdc.address, amount)
        return transact(self.w3, self.owner, call)

    def usdc_balance(self, address: str) -> int:
        return self.usdc.functions.balanceOf(address).call()

    def deposit_for_burn(
        self, depositor: DevAccount, amount: int, destination_domain: int, mint_recipient: str
    ) -> TxReceipt:
        """Approve the messenger, then ``depositForBurn``: the burn that emits the message."""
        transact(self.w3, depositor, self.usdc.functions.approve(self.messenger.address, amount))
        call = self.messenger.functions.depositForBurn(
            amount, destination_domain, address_to_bytes32(mint_recipient), self.usdc.address
        )
        return transact(self.w3, depositor, call)

    def receive_message(
        self, caller: DevAccount, message: bytes, attestation: bytes, **tx: Any
    ) -> TxReceipt | bytes:
        """``receiveMessage`` on this chain (the mint); `tx` as for :func:`transact`."""
        call = self.transmitter.functions.receiveMessage(message, attestation)
        return transact(self.w3, caller, call, **tx)

    def is_nonce_used(self, source_domain: int, nonce: int) -> bool:
        return self.transmitter.functions.usedNonces(nonce_key(source_domain, nonce)).call() == 1


def deploy_cctp(w3: Web3, owner: DevAccount, *, domain: int, attester: str) -> CctpDomain:
    """Deploy the transmitter (trusting `attester`), the messenger and USDC on one chain."""
    transmitter = deploy(w3, owner, "MessageTransmitter", domain, attester, MESSAGE_VERSION)
    messenger = deploy(w3, owner, "TokenMessenger", transmitter.address, BURN_MESSAGE_VERSION)
    usdc = deploy(w3, owner, "StandinUSDC")
    transact(w3, owner, usdc.functions.configureMinter(messenger.address, True))
    return CctpDomain(w3, domain, owner, transmitter, messenger, usdc)


def link(a: CctpDomain, b: CctpDomain) -> None:
    """Make `a` and `b` accept each other's burns: messengers trusted, USDC mapped both ways."""
    for here, there in ((a, b), (b, a)):
        transact(
            here.w3,
            here.owner,
            here.messenger.functions.addRemoteTokenMessenger(
                there.domain, address_to_bytes32(there.messenger.address)
            ),
        )
        transact(
            here.w3,
            here.owner,
            here.messenger.functions.linkTokenPair(
                here.usdc.address, there.domain, address_to_bytes32(there.usdc.address)
            ),
        )
