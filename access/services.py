"""Minting, revoking and checking API tokens (the key is never stored: only its digest)."""

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from access.models import ApiToken, ApiTokenEvent
from access.second_factor import HOLDS_MONEY_PERMISSION
from qtg.core.compiled import Compiled

logger = logging.getLogger("qtg.access")


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Minted:
    token: ApiToken
    key: str  # shown once; only its digest is kept


READ, CREATE, DECIDE = "read", "create", "decide"
SCOPES = (READ, CREATE, DECIDE)


class TokenRefused(ValueError):
    """The token cannot be minted or activated as asked (the message says why)."""


def second_factor_fresh(proof_at, now=None) -> bool:
    """Whether a second-factor proof was given recently enough to mint a token."""
    if proof_at is None:
        return False
    return (now or timezone.now()) - proof_at <= settings.QTG_TOKEN_SECOND_FACTOR_MAX_AGE


@transaction.atomic
def api_token_mint(
    *,
    user,
    actor=None,
    actor_label: str = "",
    name: str = "",
    lifetime: timedelta | None = None,
    scopes: tuple[str, ...] | list[str] | None = None,
    second_factor_at=None,
) -> Minted:
    """Mint a token for ``user``, recorded with who minted it.

    No one-person path (issue 29): a token minted for someone else is flagged, never decides
    (approve, reject, cancel, resume), and outside the embedded demo is unusable until a second
    superuser activates it. A user who must use a second factor mints their own tokens only,
    with a fresh one-time code (``second_factor_at``). ``scopes`` defaults to everything the
    token may have."""
    from access.second_factor import needs_second_factor

    lifetime = lifetime or settings.QTG_API_TOKEN_LIFETIME
    if lifetime <= timedelta(0) or lifetime > settings.QTG_API_TOKEN_MAX_LIFETIME:
        raise TokenRefused(
            f"a token lives more than 0 and at most {settings.QTG_API_TOKEN_MAX_LIFETIME.days} days"
        )
    now = timezone.now()
    for_someone_else = actor is not None and actor.pk != user.pk
    if needs_second_factor(user):
        if for_someone_else:
            raise TokenRefused(
                f"{user.get_username()} must use a second factor: only they can mint their "
                f"tokens, with a one-time code"
            )
        if not second_factor_fresh(second_factor_at, now):
            raise TokenRefused(
                "a token of a user who must use a second factor needs a one-time code given "
                "just now"
            )
    allowed = (READ, CREATE) if for_someone_else else SCOPES
    wanted = tuple(scopes) if scopes is not None else allowed
    unknown = [scope for scope in wanted if scope not in SCOPES]
    if unknown:
        raise TokenRefused(f"unknown scope(s): {', '.join(unknown)} (read, create, decide)")
    if DECIDE in wanted and DECIDE not in allowed:
        raise TokenRefused("a token minted for someone else cannot decide (approve, reject, ...)")
    if not wanted:
        raise TokenRefused("a token needs at least one scope")
    key = secrets.token_hex(20)  # 40 characters of [0-9a-f]
    pending = for_someone_else and not settings.QTG_TOKENS_FOR_OTHERS_ALONE
    token = ApiToken.objects.create(
        user=user,
        prefix=key[:8],
        digest=token_digest(key),
        name=name,
        created_at=now,
        expires_at=now + lifetime,
        minted_by=actor,
        minted_for_other=for_someone_else,
        scopes=[scope for scope in SCOPES if scope in wanted],
        second_factor_at=second_factor_at,
        activated_at=None if pending else now,
    )
    ApiTokenEvent.objects.create(
        token=token,
        action=ApiTokenEvent.Action.MINTED,
        actor=actor,
        actor_label=actor_label or (actor.get_username() if actor else ""),
        subject=user,
        for_someone_else=for_someone_else,
        detail={
            "digest": token.digest,
            "expires_at": token.expires_at.isoformat(),
            "name": name,
            "scopes": token.scopes,
            "second_factor": second_factor_at is not None,
            "awaiting_activation": pending,
        },
    )
    if for_someone_else:
        logger.warning("api token %s minted for %s by %s", token.prefix, user.get_username(), actor)
    return Minted(token=token, key=key)


@transaction.atomic
def api_token_activate(*, token: ApiToken, actor) -> ApiToken:
    """A second superuser makes a token minted for someone else usable: never its minter, nor
    the user it is for."""
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.activated_at is not None:
        return token
    if not (actor.is_active and actor.is_superuser):
        raise TokenRefused("only a superuser activates a token")
    if actor.pk in (token.minted_by_id, token.user_id):
        raise TokenRefused(
            "four-eyes: a token minted for someone else is activated by a second superuser"
        )
    token.activated_at, token.activated_by = timezone.now(), actor
    token.save(update_fields=["activated_at", "activated_by"])
    ApiTokenEvent.objects.create(
        token=token,
        action=ApiTokenEvent.Action.ACTIVATED,
        actor=actor,
        actor_label=actor.get_username(),
        subject=token.user,
        for_someone_else=True,
        detail={"minted_by": token.minted_by_id},
    )
    logger.warning("api token %s activated by %s", token.prefix, actor.get_username())
    return token


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor=None, actor_label: str = "") -> ApiToken:
    """Revoke a token now (kept, with its record)."""
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        ApiTokenEvent.objects.create(
            token=token,
            action=ApiTokenEvent.Action.REVOKED,
            actor=actor,
            actor_label=actor_label or (actor.get_username() if actor else ""),
            subject=token.user,
            for_someone_else=actor is not None and actor.pk != token.user_id,
        )
    return token


def _token_by_digest(*, digest: str):
    """The token with ``digest``, its user, and whether they hold a money permission."""
    from access.second_factor import money_permissions_of

    return (
        ApiToken.objects.select_related("user")
        .annotate(holds_money_permission=Exists(money_permissions_of(OuterRef("user_id"))))
        .filter(digest=digest)
    )


# Every API request reads it (``qtg.core.compiled``).
_TOKEN_BY_DIGEST = Compiled(_token_by_digest, digest=lambda: ApiToken._meta.get_field("digest"))


def api_token_lookup(key: str) -> ApiToken | None:
    """The usable token of an active user a presented key is, or None (unknown, expired,
    revoked, awaiting its activation, or not what its linked records say it is)."""
    found = _TOKEN_BY_DIGEST(digest=token_digest(key))
    token = found[0] if found else None
    if token is None or not token.is_usable() or not token.user.is_active:
        return None
    # What the request's permission check asks of a write (``access.second_factor``).
    setattr(token.user, HOLDS_MONEY_PERMISSION, token.holds_money_permission)
    problem = token_record_problem(token)
    if problem:
        logger.warning("api token %s refused: %s", token.prefix, problem)
        return None
    return token


def token_record_problem(token: ApiToken) -> str | None:
    """Why ``token``'s row is not what its linked records (access_apitokenevent, in the audit
    chain) say it is, or None. The runtime database role may insert and update token rows
    (it mints and revokes them) but cannot write a linked record without the audit key: a
    row inserted, or rewritten to decide, to belong to someone else's own minting, to carry a
    second-factor proof, to live longer, to carry another key or to be revoked no more, is
    refused."""
    from datetime import datetime

    from qtg.core.chain import link_problem

    events = list(ApiTokenEvent.objects.filter(token=token).order_by("pk"))
    minted = next((e for e in events if e.action == ApiTokenEvent.Action.MINTED), None)
    if minted is None:
        return "no record of its minting"
    if broken := next((e for e in events if link_problem(e)), None):
        return f"its {broken.action} record fails its link: {link_problem(broken)}"
    detail = minted.detail or {}
    if minted.subject_id != token.user_id or minted.for_someone_else != token.minted_for_other:
        return "its owner or who minted it differs from its record"
    if "digest" in detail and detail["digest"] != token.digest:
        return "its key differs from its record"
    if "scopes" in detail and not set(token.scopes) <= set(detail["scopes"]):
        return "its scopes exceed its record's"
    if token.second_factor_at is not None and detail.get("second_factor") is False:
        return "its second-factor proof is not in its record"
    if "expires_at" in detail and token.expires_at > datetime.fromisoformat(detail["expires_at"]):
        return "it expires later than its record says"
    if detail.get("awaiting_activation") and not any(
        e.action == ApiTokenEvent.Action.ACTIVATED for e in events
    ):
        return "it was activated without a record of the second superuser"
    if any(e.action == ApiTokenEvent.Action.REVOKED for e in events):
        return "it was revoked"
    return None


def api_token_user(key: str):
    """The active user a presented key belongs to, or None."""
    token = api_token_lookup(key)
    return token.user if token is not None else None
