"""Which webhook target URLs QTG will call.

http(s) only, a host is required, and every address the host resolves to must be globally
routable unless ``QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS`` is on (the embedded default): a webhook
must not become a way to reach the services next to QTG. The check runs when a subscription is
saved and again before every attempt, because DNS answers change; the attempt then connects to
the very address it checked (``pin_target_url``).
"""

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit, urlunsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(ValueError):
    """The URL is not one QTG will send webhooks to."""


# Special-purpose ranges Python 3.11's ``is_global`` still calls global (the IETF protocol
# assignments block, 192.0.0.8 among them); newer Pythons agree they are not.
_NOT_GLOBAL_EXTRA = (ipaddress.ip_network("192.0.0.0/24"),)
# IPv6 prefixes that carry an IPv4 address inside (NAT64 well-known prefix): the wrapped
# address is what a translator would reach, so it is checked too.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _wrapped(address: Address) -> list[Address]:
    """The address itself and every IPv4 address it wraps (mapped, 6to4, Teredo, NAT64)."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        for inner in (address.ipv4_mapped, address.sixtofour):
            if inner is not None:
                found.append(inner)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _is_private(address: Address) -> bool:
    """Anything not globally routable is refused (private, loopback, link-local, shared
    100.64/10 where cloud metadata lives, reserved, special-purpose), including an IPv4 address
    wrapped in an IPv6 one."""
    return any(
        not candidate.is_global
        or candidate.is_multicast
        or any(candidate in net for net in _NOT_GLOBAL_EXTRA if candidate.version == net.version)
        for candidate in _wrapped(address)
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
