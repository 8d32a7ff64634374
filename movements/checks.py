"""Start-up checks of the movements app (``manage.py check`` and every command)."""

from django.core.checks import Error, register

from movements.executors import registry


@register()
def executors_are_chosen(app_configs, **kwargs):
    """Every executor name has exactly one implementation in this deployment."""
    return [Error(problem, id="movements.E001") for problem in registry.problems()]
