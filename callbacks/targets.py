"""Which webhook target URLs QTG will call.

http(s) only, a host is required, and every address the host resolves to must be public unless
``QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS`` is on (the embedded default): a webhook must not become
a way to reach the services next to QTG. The check runs when a subscription is saved and again
before every attempt, because DNS answers change.
"""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class TargetRefused(ValueError):
    """The URL is not one QTG will send webhooks to."""


def _is_private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"cannot resolve host {host!r}: {exc}") from None
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


def validate_target_url(url: str, *, allow_private: bool | None = None) -> str:
    """Return the URL if QTG may call it; raise TargetRefused saying why not."""
    if allow_private is None:
        allow_private = settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS
    try:
        parts = urlsplit((url or "").strip())
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("only http and https URLs are allowed")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    if parts.username or parts.password:
        raise TargetRefused("credentials in the URL are not allowed: use the signing secret")
    if allow_private:
        return url.strip()
    port = port or (443 if parts.scheme == "https" else 80)
    for address in _addresses(parts.hostname, port):
        if _is_private(address):
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, a private, loopback or link-local "
                f"address (allowed only when QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS is on)"
            )
    return url.strip()
