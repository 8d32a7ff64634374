"""Existing evidence migrates (issue 28): rows written before links were keyed carry an
explicit legacy marker, verify as the prefix of their streams, and every row written after the
migration is keyed and chains on from them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from movements.models import MovementApproval, MovementEvent
from movements.services.state import record_event
from qtg.core.actors import Actor
from qtg.core.chain import link_problem
from qtg.core.checkpoints import checkpoint_write, read_checkpoints, verify_all

BEFORE = [
    ("movements", "0009_withdraw"),
    ("reservations", "0003_client_limit"),
    ("access", "0002_token_scopes_and_activation"),
    ("venues", "0005_chain_ledger"),
]


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_rows_from_before_the_migration_are_marked_legacy_and_new_rows_chain_on(
    make_movement, settings, tmp_path
):
    settings.QTG_AUDIT_CHECKPOINT_FILE = str(tmp_path / "cp.jsonl")
    movement = make_movement(approve=True)
    before = list(MovementEvent.objects.filter(request=movement).values_list("pk", flat=True))
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    migrate(BEFORE)
    try:
        migrate(latest)
    finally:
        connection.close()

    old = list(MovementEvent.objects.filter(pk__in=before).order_by("pk"))
    assert {e.chain_key for e in old} == {"legacy"}
    assert MovementApproval.objects.get(request=movement).chain_key == "legacy"
    checkpoint_write(reason="after migration")
    assert read_checkpoints().tables["movements.movementevent"].legacy_through == max(before)
    # a row written now is keyed and chains on from the newest legacy row
    new = record_event(request=movement, actor=Actor.system("tests"), detail={"after": True})
    new.refresh_from_db()
    assert new.chain_key == "embedded" and link_problem(new) is None
    assert new.chain_prev == old[-1].chain_hash
    assert verify_all().ok
