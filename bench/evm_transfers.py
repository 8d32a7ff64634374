"""EVM transfers per second through one worker on an anvil devchain (not a test).

Starts anvil, deploys a 6-decimal test USDC for the treasury (dev account 1), writes a chains
config for it (finality: ``--confirmations``), creates and approves N ``evm_transfer``
movements, then runs the worker services in-process (one worker, one connection, the sweeps'
own batching) while a block is mined after each pass, until every movement has COMPLETED at
finality. Prints transfers/s end to end and the RPC time inside the executors. Uses a scratch
database (``<name>_bench`` next to the one in DATABASE_URL on PostgreSQL; a throw-away SQLite
file otherwise).

    python bench/evm_transfers.py -n 100
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qtg_evm python bench/evm_transfers.py
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")
os.environ.setdefault("QTG_PROFILE", "embedded")
os.environ.setdefault("QTG_OBSERVE_POLL_SECONDS", "0")
os.environ.setdefault("QTG_RETRY_BASE_SECONDS", "0")
os.environ.setdefault("DJANGO_DEBUG", "0")
os.environ.setdefault("QTG_LOG_LEVEL", "WARNING")
os.environ["QTG_VENUES"] = "local"
_scratch = tempfile.mkdtemp(prefix="qtg-evm-bench-")
if not os.environ.get("DATABASE_URL"):
    os.environ["QTG_SQLITE_TEST_PATH"] = str(Path(_scratch) / "bench.sqlite3")

import django  # noqa: E402

import standins  # noqa: E402, F401  (web3 under the recursion limit; before django)

django.setup()

import yaml  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402

from movements.models import MovementRequest  # noqa: E402
from movements.services import execution, movement_approve, movement_create  # noqa: E402
from qtg.core.actors import Actor  # noqa: E402
from qtg.core.venues import provide_venues  # noqa: E402
from standins.anvil import Anvil  # noqa: E402
from standins.contracts import deploy_test_token, transact  # noqa: E402

RPC_ENV, KEY_ENV = "QTG_BENCH_RPC_URL", "QTG_BENCH_TREASURY_KEY"


def configure(chain: Anvil, confirmations: int) -> None:
    owner, treasury = chain.accounts[0], chain.accounts[1]
    usdc = deploy_test_token(chain.web3, owner, decimals=6, symbol="USDC")
    transact(chain.web3, owner, usdc.functions.mint(treasury.address, 10**12 * 10**6))
    path = Path(_scratch) / "chains.yaml"
    entry = {
        "kind": "evm",
        "chain_id": chain.chain_id,
        "rpc_url_env": RPC_ENV,
        "confirmations": confirmations,
        "block_seconds": 1,
        "replace_after_seconds": 600,
        "max_fee_gwei": 100,
        "tokens": {"USDC": {"address": usdc.address, "decimals": 6}},
        "accounts": {"treasury": {"address": treasury.address, "key": {"env": KEY_ENV}}},
    }
    path.write_text(yaml.safe_dump({"version": 1, "chains": {"devchain": entry}}))
    os.environ[RPC_ENV] = chain.url
    os.environ[KEY_ENV] = treasury.signer.key.hex()
    settings.QTG_CHAINS_CONFIG = str(path)
    provide_venues(["treasury"])


def create(n: int) -> None:
    from reservations.services import hardcap_ensure

    hardcap_ensure(asset="USDC", max_in_flight="1000000000000", note="bench")
    creator = User.objects.create_user("bench-creator", password="x")
    approver = Actor.system("bench-approver")
    for i in range(n):
        request = movement_create(
            template="evm_transfer",
            asset="USDC",
            amount="1.5",
            source="treasury",
            destination=f"0x{i + 1:040x}",
            params={"chain": "devchain"},
            idempotency_key=f"bench-evm-{i}",
            actor=Actor.for_user(creator),
        )
        movement_approve(request=request, actor=approver)


def run(chain: Anvil) -> tuple[float, int]:
    owner = execution.worker_identity()
    passes = 0
    started = time.perf_counter()
    while MovementRequest.objects.exclude(request_state="COMPLETED").exists():
        execution.reap_expired_leases()
        execution.dispatch_ready_nodes(owner=owner, limit=10_000)
        execution.observe_submitted_nodes(owner=owner, limit=10_000)
        execution.recover_unknown_nodes(owner=owner, limit=10_000)
        chain.mine()
        passes += 1
        if MovementRequest.objects.filter(request_state__in=["FAILED", "MANUAL_INTERVENTION"]):
            sys.exit("a movement did not complete: see the scratch database")
    return time.perf_counter() - started, passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--transfers", type=int, default=100)
    parser.add_argument("--confirmations", type=int, default=2)
    args = parser.parse_args()
    real_name = connection.settings_dict["NAME"]
    if settings.DB_IS_POSTGRES:
        connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{real_name}_bench"
    database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        # Its finalized block 2 behind the head: the legacy `confirmations` means tag + depth.
        with Anvil(chain_id=31337, finalized_lag=2) as chain:
            configure(chain, args.confirmations)
            t0 = time.perf_counter()
            create(args.transfers)
            setup = time.perf_counter() - t0
            elapsed, passes = run(chain)
    finally:
        connection.creation.destroy_test_db(real_name, verbosity=0)
    engine = "PostgreSQL" if settings.DB_IS_POSTGRES else "SQLite"
    print(f"database      {database} ({engine}, scratch, dropped afterwards)")
    print(f"transfers     {args.transfers} evm_transfer (ERC-20, 6 decimals) on anvil")
    print(f"finality      {args.confirmations} confirmations, one block mined per pass")
    print(f"setup         {setup:.2f} s to create and approve (not in the rate)")
    print(f"execution     {elapsed:.2f} s, one worker, in-process services, {passes} passes")
    print(f"rate          {args.transfers / elapsed:.1f} transfers/s to finality")


if __name__ == "__main__":
    main()
