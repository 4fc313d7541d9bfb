"""Bundles as files (issue 14): both verifiers accept the tar export writes, and extract it safely."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.bundle import TAR_ROOT, check_bundle, export_bundle
from intentlog.cli import main
from intentlog.errors import LedgerError

VERIFIER = Path(intentlog.__file__).parent / "verify_bundle.py"


def send(request: Any) -> bytes:
    return b'{"ok": true}'


@pytest.fixture
def tar(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        led.task("t").effect("k", {"q": 1}, send, interpret=lambda raw: raw.decode())
    path = tmp_path / "b.tar"
    assert export_bundle(root, tar=path).ok
    return path


def standalone(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(VERIFIER), str(path)], capture_output=True, text=True, timeout=60)


def test_both_verifiers_accept_the_tar_export_writes(tar: Path) -> None:
    """intentlog verify --bundle b.tar and verify_bundle.py b.tar pass it; nothing is left beside the tar."""
    before = sorted(os.listdir(tar.parent))
    r = CliRunner().invoke(main, ["verify", "--bundle", str(tar), "--json"])
    assert r.exit_code == 0, r.output
    assert '"root": "' + str(tar) in r.output
    p = standalone(tar)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every claim holds" in p.stdout
    assert sorted(os.listdir(tar.parent)) == before


def _rewrite(tar: Path, edit: Any) -> Path:
    """A copy of ``tar`` with each member passed through ``edit(info, data)`` -> [(info, data), ...]."""
    out = tar.with_name("forged.tar")
    with tarfile.open(tar) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isreg() else None  # type: ignore[union-attr]
            for info, body in edit(m, data):
                if body is not None:
                    info.size = len(body)
                dst.addfile(info, io.BytesIO(body) if body is not None else None)
    return out


def test_an_edited_member_fails_both(tar: Path) -> None:
    """A changed artifact byte inside the tar: both verifiers fail it (exit 1)."""

    def edit(m: tarfile.TarInfo, data: bytes | None) -> list[tuple[tarfile.TarInfo, bytes | None]]:
        if data is not None and m.name.endswith("states.json"):
            data = data.replace(b'"completed"', b'"failed"  ', 1)
        return [(m, data)]

    forged = _rewrite(tar, edit)
    assert CliRunner().invoke(main, ["verify", "--bundle", str(forged)]).exit_code == 1
    assert standalone(forged).returncode == 1


def _extra(info: tarfile.TarInfo, data: bytes | None = None) -> Any:
    def edit(m: tarfile.TarInfo, body: bytes | None) -> list[tuple[tarfile.TarInfo, bytes | None]]:
        out = [(m, body)]
        if m.name == f"{TAR_ROOT}/intentlog.json":
            out.append((info, data))
        return out

    return edit


def _member(name: str, kind: bytes = tarfile.REGTYPE, *, linkname: str = "", data: bytes = b"x") -> Any:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return _extra(info, data if kind == tarfile.REGTYPE else None)


BAD = {
    "absolute path": _member("/tmp/intentlog-evil-absolute"),
    "dot-dot": _member(f"{TAR_ROOT}/../intentlog-evil-dotdot"),
    "outside the bundle folder": _member("elsewhere/x"),
    "symbolic link": _member(f"{TAR_ROOT}/objects/evil", tarfile.SYMTYPE, linkname="/etc/passwd"),
    "hard link": _member(f"{TAR_ROOT}/evil", tarfile.LNKTYPE, linkname="/etc/passwd"),
    "device": _member(f"{TAR_ROOT}/dev", tarfile.CHRTYPE),
    "repeated name": _member(f"{TAR_ROOT}/intentlog.json", data=b"{}"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_an_unsafe_member_is_refused_before_anything_is_written(name: str, tar: Path) -> None:
    """Absolute paths, '..', links, devices and repeats: refused (exit 1) by both; nothing lands outside."""
    forged = _rewrite(tar, BAD[name])
    before = sorted(os.listdir(tar.parent))
    with pytest.raises(LedgerError, match="member"):
        check_bundle(forged)
    r = CliRunner().invoke(main, ["verify", "--bundle", str(forged)])
    assert r.exit_code == 1, r.output
    p = standalone(forged)
    assert p.returncode == 1 and "refused" in p.stderr, p.stdout + p.stderr
    assert sorted(os.listdir(tar.parent)) == before
    assert not Path("/tmp/intentlog-evil-absolute").exists()
    assert not (tar.parent / "intentlog-evil-dotdot").exists()


def test_a_file_that_is_no_tar_is_refused_as_no_bundle(tmp_path: Path) -> None:
    """A file that is not a tar is no bundle: refused (exit 1, the CLI's "not found"), not a traceback."""
    (tmp_path / "x.tar").write_bytes(b"not a tar at all" * 100)
    result = CliRunner().invoke(main, ["verify", "--bundle", str(tmp_path / "x.tar")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert standalone(tmp_path / "x.tar").returncode == 1
