"""Minting, revoking and checking API tokens (the key is never stored: only its digest)."""

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access.models import ApiToken, ApiTokenEvent

logger = logging.getLogger("qtg.access")


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Minted:
    token: ApiToken
    key: str  # shown once; only its digest is kept


@transaction.atomic
def api_token_mint(
    *, user, actor=None, actor_label: str = "", name: str = "", lifetime: timedelta | None = None
) -> Minted:
    """Mint a token for ``user``, recorded with who minted it; a token minted for someone
    else is flagged in the record and logged."""
    lifetime = lifetime or settings.QTG_API_TOKEN_LIFETIME
    if lifetime <= timedelta(0) or lifetime > settings.QTG_API_TOKEN_MAX_LIFETIME:
        raise ValueError(
            f"a token lives more than 0 and at most {settings.QTG_API_TOKEN_MAX_LIFETIME.days} days"
        )
    key = secrets.token_hex(20)  # 40 characters of [0-9a-f]
    now = timezone.now()
    token = ApiToken.objects.create(
        user=user,
        prefix=key[:8],
        digest=token_digest(key),
        name=name,
        created_at=now,
        expires_at=now + lifetime,
    )
    for_someone_else = actor is not None and actor.pk != user.pk
    ApiTokenEvent.objects.create(
        token=token,
        action=ApiTokenEvent.Action.MINTED,
        actor=actor,
        actor_label=actor_label or (actor.get_username() if actor else ""),
        subject=user,
        for_someone_else=for_someone_else,
        detail={"expires_at": token.expires_at.isoformat(), "name": name},
    )
    if for_someone_else:
        logger.warning("api token %s minted for %s by %s", token.prefix, user.get_username(), actor)
    return Minted(token=token, key=key)


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


def api_token_user(key: str):
    """The active user a presented key belongs to, or None (unknown, expired, revoked)."""
    token = ApiToken.objects.select_related("user").filter(digest=token_digest(key)).first()
    if token is None or not token.is_usable() or not token.user.is_active:
        return None
    return token.user
