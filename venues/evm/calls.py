"""What an EVM transaction asks the chain to do, decoded for a person (the console's chain
transaction page): a native transfer, an ERC-20 ``transfer`` or ``approve``, and whatever a
protocol built on the family registers by its 4-byte selector (``venues.cctp.calls``: CCTP
V1/V2 burns and mints). Amounts are shown in their asset's units when the reviewed chain
config names the token; otherwise in base units with the contract's address.
"""

from collections.abc import Callable, Mapping
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address

from qtg.core.chains import DecodedCall, coin_amount
from qtg.core.money import format_amount

# selector (0x + 8 hex) -> (signature, decoder of the arguments' bytes)
Decoder = Callable[[bytes, Mapping[str, Any], Any], DecodedCall]
_calls: dict[str, tuple[str, Decoder]] = {}

TRANSFER = "0xa9059cbb"  # transfer(address,uint256)
APPROVE = "0x095ea7b3"  # approve(address,uint256)


def register_call(selector: str, signature: str, decoder: Decoder) -> None:
    """Register (or replace, on a reload) how a call with ``selector`` reads."""
    _calls[selector.lower()] = (signature, decoder)


def _data(unsigned: Mapping[str, Any]) -> bytes:
    data = unsigned.get("data") or "0x"
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    text = str(data)
    return bytes.fromhex(text[2:] if text.startswith("0x") else text)


UNLIMITED = 2**256 - 1  # an allowance without a limit


def token_amount(chain: Any, token: str, units: int) -> str:
    """``units`` of the ERC-20 at ``token``, in the asset's units when the config names it."""
    for asset in getattr(chain, "tokens", {}).values():
        if asset.address and asset.address.lower() == token.lower():
            if units == UNLIMITED:
                return f"unlimited {asset.symbol}"
            return f"{format_amount(asset.from_base_units(units), grouping=True)} {asset.symbol}"
    return f"{units:,} base units of {to_checksum_address(token)}"


def native_amount(chain: Any, units: int) -> str:
    native = getattr(chain, "native", None)
    if native is None:  # no config: the family's own coin
        return coin_amount(units, 18, "ETH")
    return coin_amount(units, native.decimals, native.symbol)


def decode_call(unsigned: Mapping[str, Any], chain: Any = None) -> DecodedCall | None:
    """The call of a stored transaction (``ChainTransaction.unsigned``), or None when there is
    nothing to read; an unknown selector is named, never guessed at."""
    to = str(unsigned.get("to") or "")
    if not to:
        return None
    data = _data(unsigned)
    value = int(unsigned.get("value") or 0)
    if not data:
        return DecodedCall(
            f"Transfer of {native_amount(chain, value)} to {to_checksum_address(to)}",
            (("recipient", to_checksum_address(to)), ("amount", native_amount(chain, value))),
        )
    selector = "0x" + data[:4].hex()
    found = _calls.get(selector)
    if found is None:
        return DecodedCall(
            f"Call of {to_checksum_address(to)} (selector {selector}, not decoded)",
            (("contract", to_checksum_address(to)), ("selector", selector)),
        )
    signature, decoder = found
    try:
        decoded = decoder(data[4:], unsigned, chain)
    except Exception as exc:  # malformed calldata is shown as such, never a 500
        return DecodedCall(f"{signature} on {to_checksum_address(to)}: undecodable ({exc})")
    return DecodedCall(
        decoded.summary,
        (("function", signature), ("contract", to_checksum_address(to)), *decoded.arguments),
    )


def _erc20(verb: str) -> Decoder:
    def decode(args: bytes, unsigned: Mapping[str, Any], chain: Any) -> DecodedCall:
        who, units = abi_decode(["address", "uint256"], args)
        amount = token_amount(chain, str(unsigned["to"]), units)
        party = "recipient" if verb == "transfer" else "spender"
        summary = (
            f"ERC-20 transfer of {amount} to {to_checksum_address(who)}"
            if verb == "transfer"
            else f"ERC-20 approval of {to_checksum_address(who)} for {amount}"
        )
        return DecodedCall(summary, ((party, to_checksum_address(who)), ("amount", amount)))

    return decode


register_call(TRANSFER, "transfer(address,uint256)", _erc20("transfer"))
register_call(APPROVE, "approve(address,uint256)", _erc20("approve"))
