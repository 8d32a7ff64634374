"""Demo data for the embedded run: a user per console role (two supervisors) and a handful of
movements in various states, the approved ones moving on their own through the sandbox venues."""

import secrets
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction

from movements.models import AddressBookEntry, ApprovalPolicy, EntryStatus, PolicyStatus
from movements.permissions import (
    APPROVERS,
    OPERATORS,
    SECURITY_ADMINS,
    SUPERVISORS,
    VIEWERS,
    ensure_operator_groups,
)
from movements.services import movement_approve, movement_create
from movements.services.address_book import address_approve, address_propose
from movements.services.approvals import approval_policy_activate, approval_policy_propose
from movements.states import RequestState
from qtg.core.actors import Actor
from qtg.core.errors import QTGError
from reservations.services import hardcap_ensure_demo_defaults

# The demo users and the console groups they are in (movements/permissions.py, the README's
# role table): one per role, and two supervisors, so a two-person override can be proposed by
# one and confirmed by the other.
DEMO_USERS: dict[str, tuple[str, ...]] = {
    "viewer": (VIEWERS,),
    "approver": (APPROVERS,),
    "operator": (OPERATORS,),
    "supervisor": (SUPERVISORS,),
    "supervisor2": (SUPERVISORS,),
    "security": (SECURITY_ADMINS,),
}

# The demo's approval policy: movements above 10,000 need two approvers.
DEMO_POLICY = {"key": "above-10k", "approvals_required": 2, "amount_above": "10000"}
DEMO_SOURCE, DEMO_DESTINATION = "sandbox-exchange-a", "sandbox-exchange-b"
# The address book entries the demo movements need: their destination for USDC on each
# network they travel (``network`` of the exchange templates, ``destination_chain`` of CCTP;
# the templates' defaults).
DEMO_ADDRESS_BOOK = [
    ("USDC", "ethereum", DEMO_DESTINATION, "Sandbox exchange B (ethereum)"),
    ("USDC", "arbitrum", DEMO_DESTINATION, "Sandbox exchange B (arbitrum, via CCTP)"),
]

# (idempotency key, template, amount, params, approve?, what an operator will see)
DEMO_MOVEMENTS: list[tuple[str, str, str, dict[str, Any], bool, str]] = [
    ("demo-cex-1", "cex_to_cex", "2500.00", {}, True, "completes on its own"),
    (
        "demo-cex-slow",
        "cex_to_cex",
        "980.25",
        {"sandbox": {"withdraw_observe": "delay:40"}},
        True,
        "the exchange takes 40 s to send the withdrawal",
    ),
    ("demo-cctp", "cctp", "15000.00", {}, True, "CCTP burn, attestation, mint"),
    ("demo-split", "split_join", "730.00", {}, True, "exchange and chain watched in parallel"),
    ("demo-gated", "cex_to_cex_gated", "5200.00", {}, True, "waits for an operator at the gate"),
    (
        "demo-timeout",
        "cex_to_cex",
        "410.00",
        {"sandbox": {"withdraw": "submit_timeout_landed"}},
        True,
        "submit times out, recovery finds the withdrawal",
    ),
    (
        "demo-reorg",
        "cex_to_cex",
        "640.00",
        {"sandbox": {"deposit_observe": "reorg"}},
        True,
        "a reorg while the deposit is watched",
    ),
    (
        "demo-deposit-fails",
        "cex_to_cex",
        "320.00",
        {"sandbox": {"deposit_observe": "observe_fail"}},
        True,
        "ends in MANUAL_INTERVENTION",
    ),
    (
        "demo-rejected-by-venue",
        "cex_to_cex",
        "77.00",
        {"sandbox": {"withdraw": "fail"}},
        True,
        "the exchange refuses: FAILED, nothing moved",
    ),
    ("demo-pending", "cex_to_cex", "12000.00", {}, False, "waits for your approval"),
]

# QTG_VENUES=local: the movements run on the stand-ins `make run` started (standins/local/):
# the local exchange serves the sandbox exchanges' names, anvil the chains `devchain` and
# `devchain-b` (CCTP domains 0 and 3, account `treasury`, and `vault` on devchain-b), the
# Solana stand-in the chain `solana` (account `solana-treasury`). Sandbox faults mean nothing
# to real venues, so none is asked for. (key, template, asset, amount, source, destination,
# params, approve?, note)
LOCAL_DEMO_MOVEMENTS: list[tuple[str, str, str, str, str, str, dict[str, Any], bool, str]] = [
    (
        "local-cex-1",
        "cex_to_cex",
        "USDC",
        "2500.00",
        DEMO_SOURCE,
        DEMO_DESTINATION,
        {},
        True,
        "withdrawal through the local exchange's real API (Binance to Upbit)",
    ),
    (
        "local-cex-2",
        "cex_to_cex",
        "USDT",
        "250",
        "sandbox-exchange-b",
        "sandbox-exchange-d",
        {},
        True,
        "withdrawal through the local exchange's real API (Upbit to Bithumb)",
    ),
    (
        "local-evm-1",
        "evm_transfer",
        "USDC",
        "25.50",
        "treasury",
        "0x000000000000000000000000000000000000dEaD",
        {"chain": "devchain"},
        True,
        "ERC-20 transfer on the anvil devchain, watched to finality",
    ),
    (
        "local-cctp-1",
        "cctp",
        "USDC",
        "40.000001",
        "treasury",
        "vault",
        {"source_chain": "devchain", "destination_chain": "devchain-b"},
        True,
        "CCTP burn on devchain, attestation, mint on devchain-b",
    ),
    (
        "local-cctp-v2-fast-1",
        "cctp_v2_fast",
        "USDC",
        "30.000001",
        "treasury",
        "vault",
        {"source_chain": "devchain", "destination_chain": "devchain-b", "max_fee": "0.01"},
        True,
        "CCTP V2 fast transfer: burn with maxFee, attested at safe, amount - fee minted",
    ),
    (
        "local-sol-1",
        "sol_transfer",
        "SOL",
        "1.5",
        "solana-treasury",
        "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV",
        {},
        True,
        "SOL transfer on the local Solana node",
    ),
    (
        "local-pending",
        "evm_transfer",
        "USDC",
        "12.00",
        "treasury",
        "0x000000000000000000000000000000000000bEEF",
        {"chain": "devchain"},
        False,
        "waits for your approval",
    ),
]


def demo_movements() -> list[tuple[str, str, str, str, str, str, dict[str, Any], bool, str]]:
    """The demo's movements for the venues that serve them (``QTG_VENUES``)."""
    if settings.QTG_VENUES == "local":
        return LOCAL_DEMO_MOVEMENTS
    return [
        (key, template, "USDC", amount, DEMO_SOURCE, DEMO_DESTINATION, params, approve, note)
        for key, template, amount, params, approve, note in DEMO_MOVEMENTS
    ]


class Command(BaseCommand):
    help = "Create the demo users (printing their passwords) and demo movements."

    def add_arguments(self, parser):
        parser.add_argument(
            "--reset-passwords",
            action="store_true",
            help="give existing demo users new passwords (and print them)",
        )

    def _user(self, username: str, *, groups=(), superuser=False, reset=False):
        user = User.objects.filter(username=username).first()
        password = None
        if user is None:
            password = secrets.token_urlsafe(9)
            user = User.objects.create_user(
                username=username,
                password=password,
                email=f"{username}@qtg.invalid",
                is_staff=True,
                is_superuser=superuser,
            )
        elif reset:
            password = secrets.token_urlsafe(9)
            user.set_password(password)
            user.save(update_fields=["password"])
        if groups:
            # What a demo user may do is its groups' permissions only (earlier demos granted
            # some directly).
            user.groups.set(Group.objects.filter(name__in=groups))
            user.user_permissions.clear()
        return User.objects.get(pk=user.pk), password

    def _controls(self, *, proposer: Actor, second: Actor) -> None:
        """The demo's approval policy and address book, each proposed by one person and
        activated by another (idempotent)."""
        if not ApprovalPolicy.objects.filter(
            key=DEMO_POLICY["key"], status=PolicyStatus.ACTIVE
        ).exists():
            approval_policy_activate(
                policy=approval_policy_propose(
                    actor=proposer,
                    key=DEMO_POLICY["key"],
                    approvals_required=DEMO_POLICY["approvals_required"],
                    amount_above=Decimal(DEMO_POLICY["amount_above"]),
                    note="demo: two approvers above 10,000",
                ),
                actor=second,
            )
        for asset, network, address, label in DEMO_ADDRESS_BOOK:
            if AddressBookEntry.objects.filter(
                asset=asset, network=network, address=address, status=EntryStatus.ACTIVE
            ).exists():
                continue
            address_approve(
                entry=address_propose(
                    actor=proposer, asset=asset, network=network, address=address, label=label
                ),
                actor=second,
            )

    @transaction.atomic
    def handle(self, *args, reset_passwords=False, **options):
        reset = reset_passwords
        ensure_operator_groups()
        users = {"admin": self._user("admin", superuser=True, reset=reset)}
        for username, groups in DEMO_USERS.items():
            users[username] = self._user(username, groups=groups, reset=reset)
        # Reservations fail closed: the demo assets need hardcaps before any movement.
        hardcap_ensure_demo_defaults()
        operator, supervisor = users["operator"][0], users["supervisor"][0]
        admin_user = users["admin"][0]
        self._controls(proposer=Actor.for_user(admin_user), second=Actor.for_user(supervisor))
        created = 0
        for (
            key,
            template,
            asset,
            amount,
            source,
            destination,
            params,
            approve,
            note,
        ) in demo_movements():
            try:
                request = movement_create(
                    template=template,
                    asset=asset,
                    amount=amount,
                    source=source,
                    destination=destination,
                    params=params,
                    idempotency_key=key,
                    actor=Actor.for_user(operator),
                )
                if request.replayed:
                    continue
                created += 1
                # Above 10,000 the policy wants a second approver: the admin.
                for approver in (supervisor, admin_user):
                    if approve and request.request_state == RequestState.PENDING_APPROVAL:
                        request = movement_approve(request=request, actor=Actor.for_user(approver))
            except QTGError as exc:
                self.stderr.write(f"demo movement {key}: {exc.message}")
                continue
            self.stdout.write(f"  movement {request.short_id} {template:<17} {note}")
        self.stdout.write(self.style.SUCCESS(f"{created} demo movement(s) created"))
        for username, (_, password) in users.items():
            shown = password if password else "(unchanged; --reset-passwords for a new one)"
            self.stdout.write(f"  user {username:<11} password {shown}")
