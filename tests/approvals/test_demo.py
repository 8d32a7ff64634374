"""The demo seeds one approval policy (two approvers above 10,000) and an address book for
its destinations, and its movements pass both with the book enforced."""

import pytest
from django.core.management import call_command

from movements.models import AddressBookEntry, ApprovalPolicy, MovementRequest, PolicyStatus
from movements.states import RequestState

pytestmark = pytest.mark.django_db


def test_the_demo_seeds_its_policy_and_address_book_and_its_movements_pass_them(settings, capsys):
    settings.QTG_ADDRESS_BOOK_ENFORCED = True

    call_command("seed_demo")
    call_command("seed_demo")
    output = capsys.readouterr()

    policy = ApprovalPolicy.objects.get(status=PolicyStatus.ACTIVE)
    assert (policy.approvals_required, policy.amount_above) == (2, 10000)
    assert policy.proposed_by != policy.decided_by
    assert AddressBookEntry.objects.filter(status="ACTIVE").count() == 2
    assert "not allowlisted" not in output.err
    assert not MovementRequest.objects.filter(request_state=RequestState.FAILED).exists()
    cctp = MovementRequest.objects.get(idempotency_key="demo-cctp")
    assert cctp.request_state == RequestState.APPROVED
    assert cctp.approvals.count() == 2 and cctp.approval_policy == policy
    pending = MovementRequest.objects.get(idempotency_key="demo-pending")
    assert (pending.request_state, pending.approvals_required) == (
        RequestState.PENDING_APPROVAL,
        2,
    )
