"""Choices without the ORM: a ``StrEnum`` whose members carry a label.

A model's choice field and a pure rule module compare against the same words. Django's
``TextChoices`` lives in ``django.db``, which a rule module must not import (the architecture
test holds rules to facts in, answers out); these enums give the field what it reads
(``.choices``, ``.values``, ``.labels``, a member's ``.label``) and import nothing of Django's
database layer. Members compare equal to their values, as ``TextChoices`` members do.
"""

from enum import StrEnum


class _ClassProperty:
    def __init__(self, getter):
        self.getter = getter

    def __get__(self, instance, owner):
        return self.getter(owner)


class LabelledChoices(StrEnum):
    """``NAME = "VALUE", "Label"``; without a label, the value in title case with spaces."""

    label: str

    def __new__(cls, value: str, label: str | None = None):
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label if label is not None else value.replace("_", " ").title()
        return member

    choices = _ClassProperty(lambda cls: [(member.value, member.label) for member in cls])
    values = _ClassProperty(lambda cls: [member.value for member in cls])
    labels = _ClassProperty(lambda cls: [member.label for member in cls])
