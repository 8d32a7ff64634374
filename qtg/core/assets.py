"""How many decimals each asset has: what the console shows an amount with.

The reviewed venue configuration says it for the assets it carries (``chains.yaml``'s
tokens and native coins, provided when the venues app is ready); the well-known assets below
cover the sandbox and the exchanges, whose configuration names no decimals. When two chains
disagree (USDC has 6 decimals on Ethereum, 18 on BNB Chain), the larger is shown: showing
fewer would hide digits an amount may have.
"""

# An asset's decimals as its issuer defines them (the smallest unit).
WELL_KNOWN = {
    "BTC": 8,
    "ETH": 18,
    "EURC": 6,
    "PYUSD": 6,
    "SOL": 9,
    "USDC": 6,
    "USDT": 6,
}

_provided: dict[str, int] = {}


def provide_asset_decimals(decimals: dict[str, int]) -> None:
    """Decimals read from an app's reviewed configuration (an asset code -> its decimals)."""
    for asset, places in decimals.items():
        code = asset.strip().upper()
        _provided[code] = max(int(places), _provided.get(code, 0))


def asset_decimals(asset: str) -> int | None:
    """The decimals ``asset`` is shown with; None when nobody says (shown as written)."""
    code = (asset or "").strip().upper()
    return _provided.get(code, WELL_KNOWN.get(code))
