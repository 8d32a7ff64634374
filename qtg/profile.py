"""The deployment profile and what the production profile refuses to start with.

``qtg/settings.py`` calls it while settings are being read (so it imports nothing that needs
them), and tests call it directly.
"""

import math
from collections import Counter

from django.core.exceptions import ImproperlyConfigured

# "smoke" is the production profile with the simulated venues allowed: the production smoke
# test and the API load bench run the real web, worker and beat with movements to watch. It is
# a profile of its own, named on purpose, so no single variable can turn the sandbox on under
# "production".
PROFILES = ("embedded", "production", "smoke")
# Keys that were ever published with QTG (or are Django's own placeholder): never a secret.
KNOWN_INSECURE_SECRET_KEYS = frozenset({"qtg-embedded-insecure-key"})
MIN_SECRET_KEY_LENGTH = 50
# The embedded profile's audit key (published with QTG, so never a production key).
EMBEDDED_AUDIT_KEY = "qtg-embedded-audit-key-published-not-secret"
# Character variety: Django's get_random_secret_key() has about 30 different characters in 50,
# secrets.token_hex(25) 15 or 16 in 50; 'abcde' * 10 has 5.
MIN_SECRET_KEY_UNIQUE_CHARACTERS = 10
# Estimated entropy in bits (see secret_key_bits): a random key of the minimum length from a
# hex alphabet carries about 190, Django's generator about 230.
MIN_SECRET_KEY_BITS = 128


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


def secret_key_bits(key: str) -> float:
    """An estimate of the key's entropy in bits: the Shannon entropy of its characters times
    its length once repetition is taken out (the number of different three-character windows,
    plus two). A repeated pattern ('abcdefghij' * 5) counts once, however often it repeats."""
    if not key:
        return 0.0
    counts = Counter(key)
    per_char = -sum(n / len(key) * math.log2(n / len(key)) for n in counts.values())
    windows = {key[i : i + 3] for i in range(max(len(key) - 2, 1))}
    effective_length = min(len(key), len(windows) + 2)
    return per_char * effective_length


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
    if secret_key_bits(key) < MIN_SECRET_KEY_BITS:
        return (
            f"DJANGO_SECRET_KEY is too predictable (about {secret_key_bits(key):.0f} bits of "
            f"entropy, at least {MIN_SECRET_KEY_BITS}): generate one with "
            f"`python -c 'import secrets; print(secrets.token_urlsafe(50))'`"
        )
    return None


def production_problems(
    *,
    secret_key: str,
    debug: bool,
    sandbox_enabled: bool,
    profile: str = "production",
    metrics_token: str = "x",
    metrics_open: bool = False,
    audit_key: str = "x",
) -> list[str]:
    """Everything the production (and smoke) profile refuses to start with."""
    problems = []
    if not audit_key:
        problems.append("no audit key: set QTG_AUDIT_KEY or QTG_AUDIT_KEY_FILE (docs/audit.md)")
    elif audit_key == EMBEDDED_AUDIT_KEY:
        problems.append("QTG_AUDIT_KEY is the published embedded key")
    key_problem = secret_key_problem(secret_key)
    if key_problem:
        problems.append(key_problem)
    if debug:
        problems.append("DJANGO_DEBUG is on (debug pages show settings and code)")
    if sandbox_enabled and profile == "production":
        problems.append(
            "QTG_SANDBOX_ENABLED is on (simulated venues in production; only the smoke "
            "profile runs them)"
        )
    if not metrics_token and not metrics_open:
        problems.append(
            "QTG_METRICS_TOKEN is not set (/metrics shows the amounts in flight; set a token, "
            "or QTG_METRICS_OPEN=1 to publish them to anyone who can reach the web)"
        )
    return problems
