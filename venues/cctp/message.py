"""Circle's CCTP v1 message layouts, as the product reads them (the stand-in has its own copy
in ``standins.cctp``; the product never imports test support).

message = version u32 ‖ sourceDomain u32 ‖ destinationDomain u32 ‖ nonce u64 ‖ sender b32 ‖
recipient b32 ‖ destinationCaller b32 ‖ body; burn body = version u32 ‖ burnToken b32 ‖
mintRecipient b32 ‖ amount u256 ‖ messageSender b32.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from eth_utils import keccak

from venues.ethlib import Web3

MESSAGE_BODY_INDEX = 116
BURN_MESSAGE_LENGTH = 132


def address_to_bytes32(address: str) -> bytes:
    return b"\0" * 12 + bytes.fromhex(Web3.to_checksum_address(address)[2:])


def nonce_key(source_domain: int, nonce: int) -> bytes:
    """The key of ``MessageTransmitter.usedNonces``: keccak256(uint32 ‖ uint64)."""
    return keccak(struct.pack(">IQ", source_domain, nonce))


@dataclass(frozen=True)
class BurnBody:
    version: int
    burn_token: bytes
    mint_recipient: bytes
    amount: int
    message_sender: bytes


@dataclass(frozen=True)
class Message:
    version: int
    source_domain: int
    destination_domain: int
    nonce: int
    sender: bytes
    recipient: bytes
    destination_caller: bytes
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

    @property
    def burn(self) -> BurnBody:
        raw = self.body
        if len(raw) != BURN_MESSAGE_LENGTH:
            raise ValueError(f"burn message must be {BURN_MESSAGE_LENGTH} bytes, not {len(raw)}")
        (version,) = struct.unpack(">I", raw[:4])
        return BurnBody(
            version, raw[4:36], raw[36:68], int.from_bytes(raw[68:100], "big"), raw[100:132]
        )
