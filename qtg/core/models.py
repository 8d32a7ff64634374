"""Model building blocks shared by the apps."""

from django.db import models

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


def _label(model: type[models.Model]) -> str:
    return str(model._meta.verbose_name_plural).capitalize()
