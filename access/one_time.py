"""Secrets shown once (a minted API key, a webhook signing secret): kept in the server-side
session until the page that shows them is rendered, then gone.

Django's message storage keeps messages in a cookie first (signed, not encrypted), so a secret
put in a message travels to the browser and back in clear; here the browser only ever receives
the page itself, sent with ``Cache-Control: no-store``.
"""

import secrets

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET

SESSION_KEY = "qtg_one_time_secrets"


def secret_show_once(
    request: HttpRequest, *, title: str, secret: str, note: str, back_url: str
) -> HttpResponseRedirect:
    """Keep ``secret`` in the session and send the browser to the page that shows it once."""
    ticket = secrets.token_urlsafe(16)
    pending = dict(request.session.get(SESSION_KEY, {}))
    pending[ticket] = {"title": title, "secret": secret, "note": note, "back_url": back_url}
    request.session[SESSION_KEY] = pending
    return HttpResponseRedirect(reverse("one-time-secret", args=[ticket]))


@require_GET
@staff_member_required
def one_time_secret_view(request: HttpRequest, ticket: str) -> HttpResponse:
    """Show a pending secret and forget it: a reload says it was already shown."""
    pending = dict(request.session.get(SESSION_KEY, {}))
    shown = pending.pop(ticket, None)
    request.session[SESSION_KEY] = pending
    response = render(
        request,
        "access/one_time_secret.html",
        {"shown": shown, "title": (shown or {}).get("title", "Already shown")},
        status=200 if shown else 410,
    )
    add_never_cache_headers(response)
    response["Cache-Control"] = "no-store, " + response["Cache-Control"]
    return response
