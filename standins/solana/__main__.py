"""`python -m standins.solana --port P`: serve the local Solana JSON-RPC until interrupted.
Prints `LISTENING http://host:port` once it accepts connections."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from .ledger import Ledger, Settings
from .server import SolanaServer


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    defaults = Settings()
    parser = argparse.ArgumentParser(prog="python -m standins.solana", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--slot-seconds", type=float, default=defaults.slot_seconds)
    parser.add_argument("--confirmed-after", type=int, default=defaults.confirmed_after)
    parser.add_argument("--finalized-after", type=int, default=defaults.finalized_after)
    parser.add_argument("--blockhash-validity", type=int, default=defaults.blockhash_validity)
    parser.add_argument("--skip-every", type=int, default=defaults.skip_every)
    parser.add_argument("--first-slot", type=int, default=defaults.first_slot)
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)

    settings = Settings(
        slot_seconds=args.slot_seconds,
        confirmed_after=args.confirmed_after,
        finalized_after=args.finalized_after,
        blockhash_validity=args.blockhash_validity,
        skip_every=args.skip_every,
        first_slot=args.first_slot,
    )
    server = SolanaServer((args.host, args.port), Ledger(settings))
    # SIGTERM (from the harness or `make run`) stops it like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"LISTENING {server.base_url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
