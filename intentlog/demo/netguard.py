"""Outbound network refused: an audit hook that lets a process reach loopback addresses only.

Every demo process installs it first (:func:`install`), before any other import does
network work. ``sys.addaudithook`` hooks cannot be removed, so nothing later in the
process can switch it off. A ``connect`` (or ``sendto``) to an address that is not
loopback, and a name lookup of anything but ``localhost`` or a loopback literal, raise
:class:`PermissionError` before a packet leaves. Unix sockets are left alone.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

__all__ = ["REFUSED", "install", "is_loopback"]

REFUSED = "outbound network refused"
_LOOKUP_OK = frozenset({"localhost", "localhost.", ""})
_installed = False


def is_loopback(host: object) -> bool:
    """True for ``localhost`` and loopback address literals (127.0.0.0/8, ::1)."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOOKUP_OK:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event in ("socket.connect", "socket.sendto"):
        address = args[1] if len(args) > 1 else None
        if isinstance(address, tuple) and address and not is_loopback(address[0]):
            raise PermissionError(f"{REFUSED}: {event} to {address[0]}:{address[1] if len(address) > 1 else ''}")
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"):
        host = args[0] if args else None
        if host is not None and not is_loopback(host):
            raise PermissionError(f"{REFUSED}: a lookup of {host!r}")


def install() -> None:
    """Refuse, for the rest of this process, every network connection that is not to loopback."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
