"""The deployment profile and what the production profile refuses to start with.

``qtg/settings.py`` calls it while settings are being read (so it imports nothing that needs
them), and tests call it directly.
"""

from django.core.exceptions import ImproperlyConfigured

PROFILES = ("embedded", "production")
# Keys that were ever published with QTG (or are Django's own placeholder): never a secret.
KNOWN_INSECURE_SECRET_KEYS = frozenset({"qtg-embedded-insecure-key"})
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARACTERS = 5


class ProfileRefused(ImproperlyConfigured):
    """The environment asks for something this profile never runs with."""


def profile_from_env(raw: str | None) -> str:
    """The profile named exactly; anything else (unset, a typo, another case) stops the start.

    A profile that is merely guessed would fail open: the embedded demo turns on DEBUG, the
    published key and the sandbox venues.
    """
    if raw not in PROFILES:
        raise ProfileRefused(
            f"QTG_PROFILE must be exactly one of {', '.join(PROFILES)} (got {raw!r}); "
            f"`make run` and `make test` set embedded, a server sets production"
        )
    return raw


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` is not a usable production SECRET_KEY, or None."""
    if not key:
        return "DJANGO_SECRET_KEY is not set"
    if key in KNOWN_INSECURE_SECRET_KEYS or key.startswith("django-insecure"):
        return "DJANGO_SECRET_KEY is a published, insecure key"
    if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < MIN_SECRET_KEY_UNIQUE_CHARACTERS:
        return (
            f"DJANGO_SECRET_KEY is too short or too simple (at least "
            f"{MIN_SECRET_KEY_LENGTH} characters, {MIN_SECRET_KEY_UNIQUE_CHARACTERS} different)"
        )
    return None


def production_problems(*, secret_key: str, debug: bool, sandbox_enabled: bool) -> list[str]:
    """Everything the production profile refuses to start with."""
    problems = []
    key_problem = secret_key_problem(secret_key)
    if key_problem:
        problems.append(key_problem)
    if debug:
        problems.append("DJANGO_DEBUG is on (debug pages show settings and code)")
    if sandbox_enabled:
        problems.append("QTG_SANDBOX_ENABLED is on (simulated venues in production)")
    return problems
