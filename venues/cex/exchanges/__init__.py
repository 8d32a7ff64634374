"""Each exchange QTG speaks, in its own module (``binance``, ``upbit``, ``bithumb``): what it
can prove (client ids or history matching, deposit records with or without an address,
signatures the exchange enforces a validity on), its status vocabularies, the parameters of
its calls and the parsers of its records. Nothing outside this package branches on the kind
of exchange: it asks the account's dialect (``dialect(kind)``)."""

from venues.cex.exchanges.base import Dialect
from venues.cex.exchanges.binance import Binance
from venues.cex.exchanges.bithumb import Bithumb
from venues.cex.exchanges.upbit import Upbit

DIALECTS: dict[str, Dialect] = {d.kind: d for d in (Binance(), Upbit(), Bithumb())}
KINDS = tuple(DIALECTS)


def dialect(kind: str) -> Dialect:
    try:
        return DIALECTS[kind]
    except KeyError:
        raise LookupError(f"no exchange dialect {kind!r} (known: {', '.join(KINDS)})") from None


__all__ = ["DIALECTS", "KINDS", "Dialect", "dialect"]
