"""`python -m standins.exchange --port P --config accounts.yaml`: serve the local exchange
until interrupted. Prints `LISTENING http://host:port` once it accepts connections."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from .config import build_venues, resolve_config
from .courier import Courier
from .server import ExchangeServer


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m standins.exchange", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--config", help="accounts file (YAML or JSON); default: demo accounts")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument(
        "--deliver-after",
        type=float,
        default=None,
        help="broadcast withdrawals after this many seconds and credit the deposits they make "
        "to this server's accounts (the chain between the exchanges; off by default)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)

    server = ExchangeServer((args.host, args.port), build_venues(resolve_config(args.config)))
    # SIGTERM (from the harness or `make run`) stops it like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.deliver_after is not None:
        Courier(server.venues, server.stopping, deliver_after=args.deliver_after).start()
    print(f"LISTENING {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
