"""The kernel's model bases serve every table of their shape (issue 27 item 4): an audit event
(append-only, chained, naming who acted by ``actor_type`` and ``actor_id``) is an
``AuditEventModel``; a reviewed row (proposed by one person, decided by another) takes its
proposal/decision block from ``reviewed_model``. Moving a table onto a base changed no column:
the migrations hold the models exactly."""

from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command

from qtg.core.models import AuditEventModel

PRODUCT_APPS = {"access", "movements", "reservations", "callbacks", "venues", "sandbox", "ops"}


def product_models():
    return [m for m in apps.get_models() if m._meta.app_label in PRODUCT_APPS]


def test_every_table_naming_its_actor_is_an_audit_event():
    shaped = [m for m in product_models() if {"actor_type", "actor_id"} <= _field_names(m)]
    assert shaped, "no audit-event table found: the test reads the wrong apps"
    assert [m.__name__ for m in shaped if not issubclass(m, AuditEventModel)] == []


def test_every_proposed_and_decided_row_takes_its_block_from_the_kernel():
    reviewed = [m for m in product_models() if "proposed_by" in _field_names(m)]
    assert {m.__name__ for m in reviewed} >= {
        "ApprovalPolicy",
        "AddressBookEntry",
        "OverrideProposal",
    }
    offending = [m.__name__ for m in reviewed if not _kernel_base_defines(m, "proposed_by")]
    assert offending == []


@pytest.mark.django_db
def test_the_migrations_hold_the_models_exactly():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def _field_names(model) -> set[str]:
    return {field.name for field in model._meta.get_fields()}


def _kernel_base_defines(model, field: str) -> bool:
    return any(
        base.__module__ == "qtg.core.models"
        and base._meta.abstract
        and any(f.name == field for f in base._meta.fields)
        for base in model.__mro__[1:]
        if hasattr(base, "_meta")
    )
