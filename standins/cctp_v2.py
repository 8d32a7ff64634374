"""The CCTP V2 stand-in on a devchain: deploy beside V1, link two chains, the V2 layouts.

One :class:`CctpV2Domain` is one chain's MessageTransmitterV2 + TokenMessengerV2, minting and
burning the chain's StandinUSDC (the same token the V1 messenger uses, as on a real chain where
one USDC has both versions as minters). :func:`link_v2` makes two domains trust each other's
V2 messenger, map each other's USDC and allow burns up to a per-message limit.

V2 differs from V1 (see ``standins/contracts/MessageTransmitterV2.sol`` and
``TokenMessengerV2.sol``, whose layouts are Circle's ``MessageV2`` / ``BurnMessageV2``):
``depositForBurn(amount, destinationDomain, mintRecipient, burnToken, destinationCaller, maxFee,
minFinalityThreshold)`` returns nothing; the message it emits has a zero nonce, a zero
finalityThresholdExecuted and a zero feeExecuted / expirationBlock. The attester (Iris) fills
those in off-chain and signs the completed message, so the message a client receives is not
the one the burn emitted. ``usedNonces`` is keyed by the bytes32 nonce itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

from web3 import Web3
from web3.contract import Contract
from web3.types import TxReceipt

from standins.anvil import DevAccount
from standins.cctp import address_to_bytes32
from standins.contracts import deploy, transact

MESSAGE_VERSION_V2 = 1
BURN_MESSAGE_VERSION_V2 = 1
MESSAGE_BODY_INDEX_V2 = 148
HOOK_DATA_INDEX = 228
MAX_MESSAGE_BODY_SIZE = 8192
FINALITY_THRESHOLD_CONFIRMED = 1000  # fast transfer: attested at the source's confirmed point
FINALITY_THRESHOLD_FINALIZED = 2000  # standard transfer: attested at finality
UINT256_MAX = 2**256 - 1


@dataclass(frozen=True)
class MessageV2:
    """A CCTP V2 message: a 148-byte header then the body."""

    version: int
    source_domain: int
    destination_domain: int
    nonce: bytes  # bytes32, assigned by the attester (zero as emitted)
    sender: bytes  # bytes32
    recipient: bytes  # bytes32
    destination_caller: bytes  # bytes32
    min_finality_threshold: int
    finality_threshold_executed: int  # set by the attester (zero as emitted)
    body: bytes

    @classmethod
    def parse(cls, raw: bytes) -> MessageV2:
        raw = bytes(raw)
        if len(raw) < MESSAGE_BODY_INDEX_V2:
            raise ValueError(f"CCTP V2 message too short: {len(raw)} bytes")
        version, source, destination = struct.unpack(">III", raw[:12])
        min_threshold, executed = struct.unpack(">II", raw[140:148])
        return cls(
            version,
            source,
            destination,
            raw[12:44],
            raw[44:76],
            raw[76:108],
            raw[108:140],
            min_threshold,
            executed,
            raw[148:],
        )

    def encode(self) -> bytes:
        return (
            struct.pack(">III", self.version, self.source_domain, self.destination_domain)
            + self.nonce
            + self.sender
            + self.recipient
            + self.destination_caller
            + struct.pack(">II", self.min_finality_threshold, self.finality_threshold_executed)
            + self.body
        )

    @property
    def burn(self) -> BurnMessageV2:
        return BurnMessageV2.parse(self.body)

    def with_(self, **changes: Any) -> MessageV2:
        return replace(self, **changes)


@dataclass(frozen=True)
class BurnMessageV2:
    """The body of a TokenMessengerV2 message."""

    version: int
    burn_token: bytes  # bytes32
    mint_recipient: bytes  # bytes32
    amount: int
    message_sender: bytes  # bytes32
    max_fee: int
    fee_executed: int  # set by the attester
    expiration_block: int  # set by the attester; 0: never expires
    hook_data: bytes

    @classmethod
    def parse(cls, raw: bytes) -> BurnMessageV2:
        raw = bytes(raw)
        if len(raw) < HOOK_DATA_INDEX:
            raise ValueError(f"CCTP V2 burn message too short: {len(raw)} bytes")

        def word(offset: int) -> int:
            return int.from_bytes(raw[offset : offset + 32], "big")

        (version,) = struct.unpack(">I", raw[:4])
        return cls(
            version,
            raw[4:36],
            raw[36:68],
            word(68),
            raw[100:132],
            word(132),
            word(164),
            word(196),
            raw[228:],
        )

    def encode(self) -> bytes:
        return (
            struct.pack(">I", self.version)
            + self.burn_token
            + self.mint_recipient
            + self.amount.to_bytes(32, "big")
            + self.message_sender
            + self.max_fee.to_bytes(32, "big")
            + self.fee_executed.to_bytes(32, "big")
            + self.expiration_block.to_bytes(32, "big")
            + self.hook_data
        )


@dataclass
class CctpV2Domain:
    """CCTP V2 on one chain."""

    w3: Web3
    domain: int
    owner: DevAccount
    transmitter: Contract  # MessageTransmitterV2
    messenger: Contract  # TokenMessengerV2
    usdc: Contract

    def usdc_balance(self, address: str) -> int:
        return self.usdc.functions.balanceOf(address).call()

    def set_burn_limit(self, amount: int) -> TxReceipt:
        call = self.messenger.functions.setMaxBurnAmountPerMessage(self.usdc.address, amount)
        return transact(self.w3, self.owner, call)

    def deposit_for_burn(
        self,
        depositor: DevAccount,
        amount: int,
        destination_domain: int,
        mint_recipient: str,
        *,
        max_fee: int,
        min_finality_threshold: int,
        destination_caller: bytes = b"\0" * 32,
        hook_data: bytes = b"",
    ) -> TxReceipt:
        """Approve the V2 messenger, then ``depositForBurn`` (or ``depositForBurnWithHook``)."""
        transact(self.w3, depositor, self.usdc.functions.approve(self.messenger.address, amount))
        args = (
            amount,
            destination_domain,
            address_to_bytes32(mint_recipient),
            self.usdc.address,
            destination_caller,
            max_fee,
            min_finality_threshold,
        )
        functions = self.messenger.functions
        call = (
            functions.depositForBurnWithHook(*args, hook_data)
            if hook_data
            else functions.depositForBurn(*args)
        )
        return transact(self.w3, depositor, call)

    def receive_message(
        self, caller: DevAccount, message: bytes, attestation: bytes, **tx: Any
    ) -> TxReceipt | bytes:
        call = self.transmitter.functions.receiveMessage(message, attestation)
        return transact(self.w3, caller, call, **tx)

    def is_nonce_used(self, nonce: bytes) -> bool:
        return self.transmitter.functions.usedNonces(nonce).call() == 1


def deploy_cctp_v2(
    w3: Web3,
    owner: DevAccount,
    *,
    domain: int,
    attester: str,
    usdc: Contract,
    fee_recipient: str,
) -> CctpV2Domain:
    """Deploy MessageTransmitterV2 (trusting `attester`) and TokenMessengerV2 (paying fees to
    `fee_recipient`) beside the chain's V1 contracts, and make the V2 messenger a minter of
    `usdc` (the chain's StandinUSDC, owned by `owner`)."""
    transmitter = deploy(
        w3,
        owner,
        "MessageTransmitterV2",
        domain,
        attester,
        MESSAGE_VERSION_V2,
        MAX_MESSAGE_BODY_SIZE,
    )
    messenger = deploy(
        w3,
        owner,
        "TokenMessengerV2",
        transmitter.address,
        BURN_MESSAGE_VERSION_V2,
        Web3.to_checksum_address(fee_recipient),
    )
    transact(w3, owner, usdc.functions.configureMinter(messenger.address, True))
    return CctpV2Domain(w3, domain, owner, transmitter, messenger, usdc)


def link_v2(a: CctpV2Domain, b: CctpV2Domain, *, burn_limit: int = UINT256_MAX) -> None:
    """Make `a` and `b` accept each other's V2 burns and allow burns up to `burn_limit`."""
    for here, there in ((a, b), (b, a)):
        functions = here.messenger.functions
        transact(
            here.w3,
            here.owner,
            functions.addRemoteTokenMessenger(
                there.domain, address_to_bytes32(there.messenger.address)
            ),
        )
        transact(
            here.w3,
            here.owner,
            functions.linkTokenPair(
                here.usdc.address, there.domain, address_to_bytes32(there.usdc.address)
            ),
        )
        here.set_burn_limit(burn_limit)
