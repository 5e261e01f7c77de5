"""Where a webhook may go: http or https only, and never to the server's own network. A user must not make the
server probe its loopback, private, link-local or reserved addresses (the cloud's metadata service at
169.254.169.254, a database on 10.x). The host name is resolved and every address it resolves to is checked
with the ipaddress module, at save time and again at send time (DNS can change): the connection then goes to an
address that was checked (`PinnedHTTPConnection`), so a name that changes in between cannot slip through. The
admin allows such targets with RLWEB_WEBHOOK_ALLOW_PRIVATE=True (a webhook receiver on the same network).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

SCHEMES = ("http", "https")


class TargetRefused(Exception):
    """Why a webhook URL is refused, in words a user reads next to the field and in the delivery log."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with its query
    addresses: tuple[str, ...]  # every one checked


def why_not_public(address: str) -> str:
    """Why `address` is not one a webhook may reach ("" when it may)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    for flag, what in (("is_loopback", "a loopback"), ("is_link_local", "a link-local"),
                       ("is_private", "a private"), ("is_multicast", "a multicast"),
                       ("is_unspecified", "an unspecified"), ("is_reserved", "a reserved")):
        if getattr(ip, flag):
            return f"{ip} is {what} address"
    if not ip.is_global:
        return f"{ip} is not a public address"
    return ""


def parse(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise TargetRefused(f"This is not a URL rlweb can send to ({error}).") from None
    if parts.scheme not in SCHEMES:
        raise TargetRefused("Only http:// and https:// webhooks are sent.")
    if not parts.hostname:
        raise TargetRefused("The URL names no host.")
    if parts.username or parts.password:
        raise TargetRefused("Put no user name or password in the URL: the signature proves the sender.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


def check(url: str) -> Target:
    """The target of `url` with the addresses its host resolves to now, or TargetRefused saying why."""
    scheme, host, port, path = parse(url)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise TargetRefused(f"The host {host} does not resolve ({error}).") from None
    addresses = tuple(dict.fromkeys(info[4][0] for info in found))
    if not addresses:
        raise TargetRefused(f"The host {host} does not resolve.")
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            why = why_not_public(address)
            if why:
                named = "" if address == host else f"{host} resolves to {address}: "
                raise TargetRefused(f"Refused: {named}{why}, and webhooks go only to public addresses "
                                    "(the admin may allow others with RLWEB_WEBHOOK_ALLOW_PRIVATE=True).")
    return Target(scheme, host, port, path, addresses)


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to `host` that connects to `address`, one its check passed, not to whatever the name
    resolves to by then."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """The same over TLS: the certificate is checked against the host name."""

    default_port = http.client.HTTPS_PORT

    def connect(self) -> None:
        super().connect()
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host)


def connection(target: Target, timeout: float) -> PinnedHTTPConnection:
    kind = PinnedHTTPSConnection if target.scheme == "https" else PinnedHTTPConnection
    return kind(target.host, target.port, target.addresses[0], timeout)
