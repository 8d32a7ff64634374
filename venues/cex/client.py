"""ccxt clients for the configured exchange accounts.

Each client is ccxt's own class for the exchange (its signing: Binance's HMAC-SHA256 query
signature, Upbit's and Bithumb's JWT with a SHA-512 query hash) with one addition: every HTTP
request takes a token of the credential's shared budget first (``ratelimit``), and an answer
telling us to wait (429, 418) is remembered there for every worker. Clients are kept per
thread (a ccxt instance is not thread-safe) so markets are loaded once per process.
"""

import hashlib
import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import ccxt

from venues.cex import ratelimit
from venues.cex.config import ExchangeAccount

# ccxt logs each request's headers (the API key, Upbit's signed token) at DEBUG: never let
# them reach a log, whatever the root level.
logging.getLogger("ccxt").setLevel(logging.INFO)

# Where the exchange names no wait (Upbit's 429 has no Retry-After), how long to hold off.
DEFAULT_BACKOFF_SECONDS = 1.0


class Throttled(Exception):
    """Our own budget (or a remembered Retry-After/ban) says not to send this request yet:
    nothing was sent."""

    def __init__(self, seconds: float, reason: str) -> None:
        super().__init__(f"{reason}: ask again in {seconds:.1f}s")
        self.retry_after = seconds


def _moved(api: Any, base: str) -> Any:
    """ccxt's ``urls['api']`` with every entry moved onto ``base`` keeping its path
    (``https://api.binance.com/sapi/v1`` -> ``<base>/sapi/v1``)."""
    if isinstance(api, dict):
        return {key: _moved(value, base) for key, value in api.items()}
    target = urlsplit(base.rstrip("/"))
    path = urlsplit(api).path if "://" in api else ""
    return urlunsplit((target.scheme, target.netloc, target.path + path, "", ""))


def _retry_after(exchange: Any, default: float) -> float:
    headers = getattr(exchange, "last_response_headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(float(value), 0.0) if value is not None else default
    except (TypeError, ValueError):
        return default


def _budgeted(base: type) -> type:
    """``base`` (a ccxt exchange class) whose requests go through the shared budget."""

    class Budgeted(base):  # type: ignore[misc, valid-type]
        qtg_credential = ""
        qtg_budget = ratelimit.Budget(per_second=8.0, burst=8.0)
        # How long one request may wait for its token before ``Throttled`` is raised.
        qtg_max_wait = 2.0

        # A token taken ahead by ``qtg_reserve`` (spent by the next request).
        qtg_reserved = False

        def qtg_reserve(self) -> None:
            """Wait (at most ``qtg_max_wait``) for the next request's token now, so that
            request leaves without waiting: a withdrawal is stamped and fenced after this,
            and a wait after the stamp would send it with a window already spent."""
            if not self.qtg_reserved:
                self._qtg_take()
                self.qtg_reserved = True

        def _qtg_take(self) -> None:
            waited = 0.0
            while (wait := ratelimit.take(self.qtg_credential, self.qtg_budget)) > 0:
                if waited + wait > self.qtg_max_wait:
                    raise Throttled(wait, f"{self.id} request budget of this credential")
                time.sleep(wait)
                waited += wait

        def fetch(self, url, method="GET", headers=None, body=None):
            if self.qtg_reserved:
                self.qtg_reserved = False
            else:
                self._qtg_take()
            try:
                return super().fetch(url, method, headers, body)
            except (ccxt.DDoSProtection, ccxt.RateLimitExceeded) as exc:
                if "-2015" in str(exc):
                    # ccxt reads Binance's "invalid API key, IP or permissions" as a rate
                    # limit once the instance has made a private call: it is a refusal.
                    raise ccxt.PermissionDenied(str(exc)) from None
                seconds = _retry_after(self, DEFAULT_BACKOFF_SECONDS)
                banned = "418" in str(exc)
                ratelimit.block(
                    self.qtg_credential,
                    self.qtg_budget,
                    seconds=seconds,
                    reason=f"{'banned' if banned else 'rate limited'} by {self.id}",
                )
                exc.qtg_retry_after = seconds  # type: ignore[attr-defined]
                raise

    Budgeted.__name__ = f"Budgeted{base.__name__}"
    return Budgeted


_classes: dict[str, type] = {}
_local = threading.local()


def client(account: ExchangeAccount) -> Any:
    """This thread's ccxt client for ``account`` (created, with its markets loaded lazily,
    the first time)."""
    credentials = account.credentials()
    identity = hashlib.sha256(
        "\0".join(
            (account.name, account.kind, account.api_url, credentials.api_key, credentials.secret)
        ).encode()
    ).hexdigest()
    cache: dict[str, Any] = _local.__dict__.setdefault("clients", {})
    found = cache.get(identity)
    if found is None:
        cls = _classes.get(account.kind)
        if cls is None:
            cls = _classes[account.kind] = _budgeted(getattr(ccxt, account.kind))
        options: dict[str, Any] = {
            "apiKey": credentials.api_key,
            "secret": credentials.secret,
            # The shared budget paces requests; ccxt's own pacing is per instance only.
            "enableRateLimit": False,
            "timeout": int(account.timeout_seconds * 1000),
        }
        if account.api_url:
            options["urls"] = {
                "api": _moved(getattr(ccxt, account.kind)().urls["api"], account.api_url)
            }
        options.update(account.dialect.client_options(moved=bool(account.api_url)))
        found = cls(options)
        found.qtg_credential = f"{account.kind}:{credentials.fingerprint}"
        found.qtg_budget = ratelimit.Budget(account.rate_per_second, account.rate_burst)
        cache[identity] = found
    return found


def secrets_of(account: ExchangeAccount) -> tuple[str, ...]:
    """The strings that must never appear in a log, an error or evidence."""
    try:
        credentials = account.credentials()
    except Exception:
        return ()
    return tuple(s for s in (credentials.api_key, credentials.secret) if len(s) >= 6)
