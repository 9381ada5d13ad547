"""Which addresses a webhook may reach, checked when it is registered and again at each
connection (a name may resolve elsewhere by then): never loopback, private, link-local,
site-local, multicast, reserved, unspecified or a cloud's metadata service, unless
REPORTS_WEBHOOK_ALLOW_PRIVATE is on, nor an IPv6 address that carries one of those as
its IPv4 part (mapped, NAT64, SIIT, IPv4-compatible). Cloud metadata stays refused even
then.

A lookup waits at most REPORTS_WEBHOOK_TIMEOUT_S, as a try's connection does: the name
server is the URL's owner's to choose, and one that never answers would otherwise hold a
request, or one of the worker's few senders, for as long as the system's resolver waits.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

MAX_URL_CHARS = 2000
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


class Refused(Exception):
    """The URL may not be used; the message says why, for the user."""


@dataclass(frozen=True)
class Target:
    """Where to connect: the address checked, and the name and port the URL gave."""

    scheme: str
    host: str  # the name, for the Host header and TLS (SNI and the certificate)
    port: int
    ip: str
    path: str  # with its query


def parse(url: str) -> tuple[str, str, int, str]:
    """Return the URL's scheme, host, port and path, or raise Refused."""
    if not isinstance(url, str) or not url.strip():
        raise Refused("Send the endpoint's URL.")
    if len(url) > MAX_URL_CHARS:
        raise Refused(f"The URL is longer than {MAX_URL_CHARS:,} characters.")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise Refused("The URL must not contain spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("The URL cannot be read.") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise Refused("The URL must be http:// or https:// with a host.")
    if parts.username or parts.password:
        raise Refused("The URL must not carry a user name or password.")
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


# IPv6 prefixes that carry an IPv4 address in their last 32 bits, which a translator on
# the path (NAT64, SIIT) or the host itself (the old IPv4-compatible form) may connect to:
# judged by the IPv4 address they carry, so that 64:ff9b::a9fe:a9fe is the metadata
# service it reaches and 64:ff9b::a00:1 the private 10.0.0.1.
EMBEDS_IPV4 = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, the well-known prefix
    ipaddress.ip_network("::ffff:0:0:0/96"),  # SIIT, IPv4-translated
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated)
)
# Deprecated site-local addresses: routed inside a site, yet not "private" to ipaddress.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")


def _as_reached(address: ipaddress.IPv4Address | ipaddress.IPv6Address):
    """Return the address a connection to `address` reaches: the IPv4 address an
    IPv4-mapped, NAT64, SIIT or IPv4-compatible IPv6 address carries, else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if any(address in prefix for prefix in EMBEDS_IPV4) and int(address) & 0xFFFFFFFF > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def allowed(ip: str) -> bool:
    address = _as_reached(ipaddress.ip_address(ip.split("%", 1)[0]))
    if address in METADATA:
        return False
    if settings.REPORTS_WEBHOOK_ALLOW_PRIVATE:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address in SITE_LOCAL:
        return False
    return address.is_global and not address.is_multicast


def resolve(url: str) -> Target:
    """Resolve the URL's host and return a target on an allowed address, or raise Refused
    (when any of its addresses is not allowed: a name that points inside is refused)."""
    scheme, host, port, path = parse(url)
    wait_s = settings.REPORTS_WEBHOOK_TIMEOUT_S
    try:
        infos = _lookup(host, port).result(timeout=wait_s)
    except TimeoutError:
        raise Refused(f"The host {host} was not resolved within {wait_s:g} s.") from None
    except (OSError, UnicodeError):
        raise Refused(f"The host {host} cannot be resolved.") from None
    ips = [info[4][0] for info in infos]
    if not ips:
        raise Refused(f"The host {host} cannot be resolved.")
    refused = [ip for ip in ips if not allowed(ip)]
    if refused:
        raise Refused(
            f"The host {host} resolves to {refused[0]}, a loopback, private, link-local or "
            "otherwise reserved address; webhooks go to public addresses only."
        )
    return Target(scheme, host, port, ips[0], path)


def _lookup(host: str, port: int) -> Future:
    """Look `host` up on a thread of its own, which the caller may stop waiting for: the
    system's resolver cannot be interrupted, and a lookup that outlives its wait ends on
    its own when the resolver gives up."""
    found: Future = Future()

    def run() -> None:
        try:
            found.set_result(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller, who reads it from the future
            found.set_exception(exc)

    threading.Thread(target=run, name="reportline-webhook-lookup", daemon=True).start()
    return found
