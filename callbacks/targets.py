"""Which webhook target URLs QTG will call.

http(s) only, a host is required, and every address the host resolves to must be public unless
``QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS`` is on (the embedded default): a webhook must not become
a way to reach the services next to QTG. The check runs when a subscription is saved and again
before every attempt, because DNS answers change; the attempt then connects to the very address
it checked (``pin_target_url``).
"""

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit, urlunsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(ValueError):
    """The URL is not one QTG will send webhooks to."""


def _is_private(address: Address) -> bool:
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


def _addresses(host: str, port: int) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"cannot resolve host {host!r}: {exc}") from None
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


@dataclass(frozen=True)
class PinnedTarget:
    """Where to connect for one attempt: the checked address, with the original host name
    carried in the Host header and (for https) in SNI and the certificate check."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, str] = field(default_factory=dict)


def _check(url: str, allow_private: bool | None) -> tuple[SplitResult, list[Address] | None]:
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
        return parts, None
    addresses = _addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))
    for address in addresses:
        if _is_private(address):
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, a private, loopback or link-local "
                f"address (allowed only when QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS is on)"
            )
    return parts, addresses


def validate_target_url(url: str, *, allow_private: bool | None = None) -> str:
    """Return the URL if QTG may call it; raise TargetRefused saying why not."""
    _check(url, allow_private)
    return url.strip()


def pin_target_url(url: str, *, allow_private: bool | None = None) -> PinnedTarget:
    """Check the URL and, while private targets are refused, pin the connection to the address
    just checked: a DNS answer that changes between the check and the connect (rebinding)
    cannot steer the request to a private address."""
    parts, addresses = _check(url, allow_private)
    if not addresses or _is_literal(parts.hostname):
        return PinnedTarget(url=url.strip())
    address = addresses[0]
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    original = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return PinnedTarget(
        url=urlunsplit(parts._replace(netloc=netloc)),
        headers={"Host": original},
        extensions=extensions,
    )


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
