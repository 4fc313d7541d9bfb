"""The demo's network guard: a guarded process reaches loopback and nothing else, and cannot switch it off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from intentlog.demo.netguard import is_loopback

CHILD = r"""
import socket, sys
from intentlog.demo.netguard import install
server = socket.create_server(("127.0.0.1", 0))
install()
sys.addaudithook(lambda *a: None)  # another hook changes nothing: the guard stays
out = []
c = socket.create_connection(server.getsockname(), timeout=5)  # loopback: allowed
out.append("loopback ok")
c.close()
for what, attempt in (
    ("connect", lambda: socket.create_connection(("192.0.2.1", 9), timeout=2)),
    ("connect6", lambda: socket.socket(socket.AF_INET6).connect(("2001:db8::1", 9))),
    ("lookup", lambda: socket.getaddrinfo("example.com", 443)),
    ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 9))),
):
    try:
        attempt()
        out.append(what + " allowed")
    except PermissionError as exc:
        out.append(what + " refused" if "outbound network refused" in str(exc) else what + " other")
print(";".join(out))
"""


def test_a_guarded_process_reaches_loopback_only() -> None:
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "loopback ok;connect refused;connect6 refused;lookup refused;udp refused"


@pytest.mark.parametrize(
    ("host", "ok"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("localhost", True), (b"127.0.0.1", True),
     ("10.0.0.1", False), ("example.com", False), ("0.0.0.0", False), ("2001:db8::1", False), (None, False)],
)  # fmt: skip
def test_what_counts_as_loopback(host: object, ok: bool) -> None:
    assert is_loopback(host) is ok
