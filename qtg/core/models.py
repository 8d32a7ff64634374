"""Model building blocks shared by the apps."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from qtg.core.actors import ActorType
from qtg.core.chain import ChainedModel, ChainedQuerySet


class AppendOnlyQuerySet(ChainedQuerySet):
    """Bulk updates and deletes are refused: an audit table only grows."""

    def update(self, **kwargs):
        raise TypeError(f"{_label(self.model)} are append-only")

    def delete(self):
        raise TypeError(f"{_label(self.model)} are append-only")


class AppendOnlyModel(ChainedModel):
    """An audit record: written once, never changed, never deleted (the same through the
    queryset, so ``update()``/``delete()`` cannot bypass it), linked into its stream's
    evidence chain (``qtg.core.chain``) when inserted."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise TypeError(f"{_label(type(self))} are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError(f"{_label(type(self))} are append-only")


class AuditEventModel(AppendOnlyModel):
    """An app's audit event: append-only, linked into its evidence chain, and naming who
    acted (``qtg.core.actors.Actor``: its ``type`` and ``id``)."""

    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_id = models.CharField(max_length=128, blank=True)

    class Meta:
        abstract = True


def reviewed_model(
    related_prefix: str, *, decision: str = "decided", proposer_required: bool = False
) -> type[models.Model]:
    """The abstract base of a reviewed row: proposed by one person, decided by another — the
    four-eyes block the approval policies and the address book (``<decision>`` "decided":
    activated, approved, rejected, removed) and the override proposals ("confirmed", by a
    second supervisor; their proposer is always a person) share. ``related_prefix`` names the
    user's reverse relations (``<prefix>_proposed``, ``<prefix>_<decision>``), as each table
    has always had them."""

    user = settings.AUTH_USER_MODEL
    fields = {
        "proposed_by": models.ForeignKey(
            user,
            null=not proposer_required,
            blank=not proposer_required,
            on_delete=models.PROTECT,
            related_name=f"{related_prefix}_proposed",
        ),
        "proposed_at": models.DateTimeField(default=timezone.now),
        f"{decision}_by": models.ForeignKey(
            user,
            null=True,
            blank=True,
            on_delete=models.PROTECT,
            related_name=f"{related_prefix}_{decision}",
        ),
        f"{decision}_at": models.DateTimeField(null=True, blank=True),
    }
    meta = type("Meta", (), {"abstract": True})
    return type("ReviewedModel", (models.Model,), {"__module__": __name__, "Meta": meta, **fields})


def _label(model: type[models.Model]) -> str:
    return str(model._meta.verbose_name_plural).capitalize()
