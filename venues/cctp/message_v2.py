"""Circle's CCTP V2 message layouts, as the product reads them (the stand-in has its own copy in
``standins.cctp_v2``; the product never imports test support). Offsets from Circle's
``src/messages/v2/MessageV2.sol`` and ``BurnMessageV2.sol``:

message = version u32 @0 ‖ sourceDomain u32 @4 ‖ destinationDomain u32 @8 ‖ nonce b32 @12 ‖
sender b32 @44 ‖ recipient b32 @76 ‖ destinationCaller b32 @108 ‖ minFinalityThreshold u32 @140
‖ finalityThresholdExecuted u32 @144 ‖ messageBody @148;
burn body = version u32 @0 ‖ burnToken b32 @4 ‖ mintRecipient b32 @36 ‖ amount u256 @68 ‖
messageSender b32 @100 ‖ maxFee u256 @132 ‖ feeExecuted u256 @164 ‖ expirationBlock u256 @196 ‖
hookData @228.

The nonce, ``finalityThresholdExecuted`` and the body's ``feeExecuted`` and ``expirationBlock``
are zero as the burn emits the message; Circle's attester fills them in before it signs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MESSAGE_BODY_INDEX = 148
HOOK_DATA_INDEX = 228
FINALITY_THRESHOLD_CONFIRMED = 1000  # fast transfer
FINALITY_THRESHOLD_FINALIZED = 2000  # standard transfer


@dataclass(frozen=True)
class BurnBodyV2:
    version: int
    burn_token: bytes
    mint_recipient: bytes
    amount: int
    message_sender: bytes
    max_fee: int
    fee_executed: int
    expiration_block: int
    hook_data: bytes


@dataclass(frozen=True)
class MessageV2:
    version: int
    source_domain: int
    destination_domain: int
    nonce: bytes
    sender: bytes
    recipient: bytes
    destination_caller: bytes
    min_finality_threshold: int
    finality_threshold_executed: int
    body: bytes

    @classmethod
    def parse(cls, raw: bytes) -> MessageV2:
        raw = bytes(raw)
        if len(raw) < MESSAGE_BODY_INDEX:
            raise ValueError(f"CCTP V2 message too short: {len(raw)} bytes")
        version, source, destination = struct.unpack(">III", raw[:12])
        minimum, executed = struct.unpack(">II", raw[140:148])
        return cls(
            version,
            source,
            destination,
            raw[12:44],
            raw[44:76],
            raw[76:108],
            raw[108:140],
            minimum,
            executed,
            raw[MESSAGE_BODY_INDEX:],
        )

    @property
    def burn(self) -> BurnBodyV2:
        raw = self.body
        if len(raw) < HOOK_DATA_INDEX:
            raise ValueError(f"V2 burn message must be at least {HOOK_DATA_INDEX} bytes")

        def word(offset: int) -> int:
            return int.from_bytes(raw[offset : offset + 32], "big")

        (version,) = struct.unpack(">I", raw[:4])
        return BurnBodyV2(
            version,
            raw[4:36],
            raw[36:68],
            word(68),
            raw[100:132],
            word(132),
            word(164),
            word(196),
            raw[HOOK_DATA_INDEX:],
        )
