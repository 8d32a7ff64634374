"""The switches that weaken a production deployment, each with what it costs.

Outside the embedded demo every one that is set is logged as a WARNING when a process starts
(``ops.apps``), listed by ``/health/`` (status ``degraded``) and by ``manage.py check --deploy``
(``ops.checks``). The table is the runbook's list (README, "Security"); the configuration table
marks the same variables ``weakens_security`` and a test keeps the two in step. Not listed:
``DJANGO_DEBUG`` (refused outright) and the proxy's headers (``DJANGO_SECURE_PROXY_SSL_HEADER``,
``DJANGO_USE_X_FORWARDED_HOST``), which a deployment behind a proxy needs; the runbook says what
they cost.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Weakening:
    variable: str
    weakened: Callable[[Any], bool]
    cost: str


WEAKENINGS: tuple[Weakening, ...] = (
    Weakening(
        "QTG_SANDBOX_ENABLED",
        lambda s: s.QTG_SANDBOX_ENABLED,
        "simulated venues run beside the real ones (the smoke profile only)",
    ),
    Weakening(
        "QTG_OTP_REQUIRED",
        lambda s: not s.QTG_OTP_REQUIRED,
        "staff who approve, force or change money rules sign in with a password alone",
    ),
    Weakening(
        "QTG_ADDRESS_BOOK_ENFORCED",
        lambda s: not s.QTG_ADDRESS_BOOK_ENFORCED,
        "movements may pay any destination, vetted or not",
    ),
    Weakening(
        "QTG_ADDRESS_COOLDOWN_SECONDS",
        lambda s: s.QTG_ADDRESS_COOLDOWN.total_seconds() <= 0,
        "a destination is payable the moment it is approved (no time to notice a bad entry)",
    ),
    Weakening(
        "QTG_TWO_PERSON_OVERRIDES",
        lambda s: not s.QTG_TWO_PERSON_OVERRIDES,
        "one supervisor forces, cancels in transit or writes off funds alone",
    ),
    Weakening(
        "QTG_TOKENS_FOR_OTHERS_ALONE",
        lambda s: s.QTG_TOKENS_FOR_OTHERS_ALONE,
        "a superuser mints a usable API token for someone else without a second person",
    ),
    Weakening(
        "QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS",
        lambda s: s.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS,
        "webhooks may be pointed at private and loopback addresses (SSRF into the network)",
    ),
    Weakening(
        "QTG_API_LEGACY_TOKENS",
        lambda s: s.QTG_API_LEGACY_TOKENS,
        "DRF tokens stored in clear text are accepted",
    ),
    Weakening(
        "QTG_API_DOCS_REQUIRE_LOGIN",
        lambda s: not s.QTG_API_DOCS_REQUIRE_LOGIN,
        "the API schema and docs are public",
    ),
    Weakening(
        "QTG_METRICS_OPEN",
        lambda s: s.QTG_METRICS_OPEN and not s.QTG_METRICS_TOKEN,
        "/metrics (amounts in flight per asset) is readable by anyone who reaches the web",
    ),
    Weakening(
        "DJANGO_SESSION_COOKIE_SECURE",
        lambda s: not s.SESSION_COOKIE_SECURE,
        "the console's session cookie travels over plain HTTP",
    ),
    Weakening(
        "DJANGO_CSRF_COOKIE_SECURE",
        lambda s: not s.CSRF_COOKIE_SECURE,
        "the CSRF cookie travels over plain HTTP",
    ),
    Weakening(
        "DJANGO_SECURE_SSL_REDIRECT",
        lambda s: not s.SECURE_SSL_REDIRECT,
        "plain HTTP is served instead of redirected to HTTPS",
    ),
    Weakening(
        "DJANGO_SECURE_HSTS_SECONDS",
        lambda s: s.SECURE_HSTS_SECONDS <= 0,
        "browsers are not told to refuse plain HTTP (HSTS off)",
    ),
    Weakening(
        "DJANGO_SESSION_EXPIRE_AT_BROWSER_CLOSE",
        lambda s: not s.SESSION_EXPIRE_AT_BROWSER_CLOSE,
        "a console session outlives the browser",
    ),
)


def weakenings(settings: Any) -> list[dict[str, str]]:
    """The weakening switches set in ``settings`` (none in the embedded demo, which is weak
    by design), as ``{"variable", "cost"}``."""
    if settings.QTG_PROFILE == "embedded":
        return []
    return [{"variable": w.variable, "cost": w.cost} for w in WEAKENINGS if w.weakened(settings)]
