"""``manage.py check --deploy``: every security-weakening switch set is a warning."""

from django.conf import settings
from django.core.checks import Tags, Warning, register

from qtg.weakening import weakenings


@register(Tags.security, deploy=True)
def weakened_security(app_configs, **kwargs) -> list[Warning]:
    return [
        Warning(
            f"{w['variable']} weakens this deployment: {w['cost']}",
            hint="README, Security: what each switch costs.",
            id="qtg.W001",
        )
        for w in weakenings(settings)
    ]
