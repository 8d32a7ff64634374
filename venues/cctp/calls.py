"""CCTP's calls, as a person reads them on a chain transaction's page: a V1 or V2
``depositForBurn`` (amount, destination domain, mint recipient; V2's max fee and finality
threshold) and ``receiveMessage`` (the mint: the attested message's amount, recipient and
source domain, V1 or V2 by the message's version). Registered with the EVM family's call
decoder (``venues.evm.calls``) when the venues app is ready."""

from collections.abc import Mapping
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import keccak, to_checksum_address

from qtg.core.chains import DecodedCall
from venues.cctp.message_v2 import (
    FINALITY_THRESHOLD_CONFIRMED,
    FINALITY_THRESHOLD_FINALIZED,
    MessageV2,
)
from venues.evm.calls import register_call, token_amount

DEPOSIT_FOR_BURN_SIGNATURE = "depositForBurn(uint256,uint32,bytes32,address)"
DEPOSIT_FOR_BURN_V2_SIGNATURE = (
    "depositForBurn(uint256,uint32,bytes32,address,bytes32,uint256,uint32)"
)
DEPOSIT_FOR_BURN_WITH_HOOK_SIGNATURE = (
    "depositForBurnWithHook(uint256,uint32,bytes32,address,bytes32,uint256,uint32,bytes)"
)
RECEIVE_MESSAGE_SIGNATURE = "receiveMessage(bytes,bytes)"
DEPOSIT_FOR_BURN = keccak(text=DEPOSIT_FOR_BURN_SIGNATURE)[:4]
DEPOSIT_FOR_BURN_V2 = keccak(text=DEPOSIT_FOR_BURN_V2_SIGNATURE)[:4]
DEPOSIT_FOR_BURN_WITH_HOOK = keccak(text=DEPOSIT_FOR_BURN_WITH_HOOK_SIGNATURE)[:4]
# TokenMessengerV2.depositForBurn's arguments; depositForBurnWithHook adds the hook's bytes.
BURN_ARGS_V2 = ["uint256", "uint32", "bytes32", "address", "bytes32", "uint256", "uint32"]
RECEIVE_MESSAGE = keccak(text=RECEIVE_MESSAGE_SIGNATURE)[:4]
V2_MESSAGE_VERSION = 1
THRESHOLDS = {FINALITY_THRESHOLD_CONFIRMED: "fast", FINALITY_THRESHOLD_FINALIZED: "standard"}


def _address(word: bytes) -> str:
    return to_checksum_address(word[-20:])


def domain_name(domain: int) -> str:
    """``domain 3 (arbitrum)`` when the reviewed config has a chain on that domain."""
    from venues.cctp.config import cctp_chains

    try:
        names = [c.name for c in cctp_chains().values() if c.domain == domain]
    except Exception:  # a broken config never hides the decoded call
        names = []
    return f"domain {domain}" + (f" ({', '.join(names)})" if names else "")


def _burn(version: int, *, hook: bool = False):
    def decode(args: bytes, unsigned: Mapping[str, Any], chain: Any) -> DecodedCall:
        if version == 1:
            amount, domain, recipient, token = abi_decode(
                ["uint256", "uint32", "bytes32", "address"], args
            )
            extra: tuple[tuple[str, str], ...] = ()
        else:
            amount, domain, recipient, token, _caller, max_fee, threshold, *hook_data = abi_decode(
                [*BURN_ARGS_V2, "bytes"] if hook else BURN_ARGS_V2, args
            )
            extra = (
                ("max fee", token_amount(chain, token, max_fee)),
                ("finality threshold", f"{threshold} ({THRESHOLDS.get(threshold, 'custom')})"),
                *((("hook data", "0x" + bytes(hook_data[0]).hex()),) if hook else ()),
            )
        shown = token_amount(chain, token, amount)
        where = domain_name(domain)
        return DecodedCall(
            f"CCTP V{version} burn of {shown} for {_address(recipient)} on {where}",
            (
                ("amount", shown),
                ("mint recipient", _address(recipient)),
                ("destination domain", where),
                ("burn token", to_checksum_address(token)),
                *extra,
            ),
        )

    return decode


def _mint(args: bytes, unsigned: Mapping[str, Any], chain: Any) -> DecodedCall:
    from venues.cctp.message import Message  # (web3: not at start-up, see venues.apps)

    raw, _attestation = abi_decode(["bytes", "bytes"], args)
    version = int.from_bytes(raw[:4], "big")
    message = MessageV2.parse(raw) if version == V2_MESSAGE_VERSION else Message.parse(raw)
    burn = message.burn
    label = "V2" if version == V2_MESSAGE_VERSION else "V1"
    # The minted token is the destination's USDC; the message names the source's burn token.
    usdc = next(
        (a for a in getattr(chain, "tokens", {}).values() if a.symbol == "USDC"),
        None,
    )
    shown = (
        token_amount(chain, usdc.address, burn.amount)
        if usdc is not None
        else f"{burn.amount:,} base units of USDC"
    )
    source = domain_name(message.source_domain)
    return DecodedCall(
        f"CCTP {label} mint of {shown} to {_address(burn.mint_recipient)} from {source}",
        (
            ("amount", shown),
            ("mint recipient", _address(burn.mint_recipient)),
            ("source domain", source),
            ("destination domain", domain_name(message.destination_domain)),
        ),
    )


def register() -> None:
    register_call("0x" + DEPOSIT_FOR_BURN.hex(), DEPOSIT_FOR_BURN_SIGNATURE, _burn(1))
    register_call("0x" + DEPOSIT_FOR_BURN_V2.hex(), DEPOSIT_FOR_BURN_V2_SIGNATURE, _burn(2))
    register_call(
        "0x" + DEPOSIT_FOR_BURN_WITH_HOOK.hex(),
        DEPOSIT_FOR_BURN_WITH_HOOK_SIGNATURE,
        _burn(2, hook=True),
    )
    register_call("0x" + RECEIVE_MESSAGE.hex(), RECEIVE_MESSAGE_SIGNATURE, _mint)
