"""Facts from the chain, not from the config: a token's ``decimals()`` must equal what the
reviewed config says before any amount is converted with it, and CCTP's per-message burn
limit is read from the chain before a burn is planned.

A mismatch refuses that asset on that chain (``DeterministicError``, nothing sent); a chain
that does not answer is ``TransientError`` (asked again later). Checked at create (the
executor's ``validate``: a node that does not answer then is checked again at ``prepare``,
before a nonce is taken) and by ``check_chain_facts`` (the deploy system check and health).
A match is remembered by the process for ``VERIFIED_SECONDS``.
"""

import time
from typing import Any

from movements.executors.base import DeterministicError, TransientError
from venues.evm import client
from venues.evm.config import Asset, EvmChain

DECIMALS_SELECTOR = "0x313ce567"  # decimals()
LOCAL_MINTER_SELECTOR = "0xcb75c11c"  # TokenMessenger.localMinter()
BURN_LIMIT_SELECTOR = "0xa56ec632"  # TokenMinter.burnLimitsPerMessage(address)
VERIFIED_SECONDS = 600.0

_verified: dict[tuple[str, str, int], float] = {}


def _call_uint(w3: Any, to: str, data: str, what: str) -> int:
    try:
        raw = w3.eth.call({"to": to, "data": data})
    except Exception as exc:
        if client.is_network_error(exc):
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}"[:500]) from exc
        raise DeterministicError(f"{what}: the contract at {to} refused: {exc}"[:500]) from exc
    if not raw or len(bytes(raw)) < 32:
        raise DeterministicError(f"{what}: no answer from the contract at {to}")
    return int.from_bytes(bytes(raw)[:32], "big")


def token_decimals(w3: Any, address: str) -> int:
    return _call_uint(w3, address, DECIMALS_SELECTOR, f"decimals() of {address}")


def check_decimals(chain: EvmChain, asset: Asset, *, w3: Any = None) -> None:
    """The token's ``decimals()`` on the chain equals the configured ``decimals``, else
    ``DeterministicError`` naming both (an amount converted with the wrong one would move 10^k
    times what was asked). The native coin has no contract: nothing to read."""
    if asset.is_native:
        return
    key = (chain.name, asset.address.lower(), asset.decimals)
    if time.monotonic() - _verified.get(key, -VERIFIED_SECONDS) < VERIFIED_SECONDS:
        return
    found = token_decimals(w3 or client.web3_for(chain), asset.address)
    if found != asset.decimals:
        raise DeterministicError(
            f"{asset.symbol} on {chain.name}: the token contract {asset.address} has "
            f"{found} decimals, the reviewed config says {asset.decimals}; refused until the "
            "config is corrected"
        )
    _verified[key] = time.monotonic()


def burn_limit(w3: Any, token_messenger: str, token: str) -> int:
    """CCTP's per-message burn limit of ``token`` (base units), read as Circle's contracts
    expose it: ``TokenMessenger.localMinter()`` then ``TokenMinter.burnLimitsPerMessage``."""
    minter = _call_uint(w3, token_messenger, LOCAL_MINTER_SELECTOR, "localMinter()")
    minter_address = client.Web3.to_checksum_address(minter.to_bytes(20, "big"))
    word = bytes.fromhex(token[2:].lower()).rjust(32, b"\0").hex()
    return _call_uint(w3, minter_address, BURN_LIMIT_SELECTOR + word, "burnLimitsPerMessage()")


def check_chain_facts(chains: dict[str, EvmChain]) -> list[str]:
    """Every configured token of every chain checked; the problems found, as sentences."""
    problems = []
    for chain in chains.values():
        for asset in chain.tokens.values():
            try:
                check_decimals(chain, asset)
            except (DeterministicError, TransientError) as exc:
                problems.append(str(exc))
    return problems
