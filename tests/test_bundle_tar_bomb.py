"""A small tar that expands on extraction is refused by both bundle verifiers before anything is written.

Each verifier runs in a child process whose file-size limit is 1 MiB: a verifier that expands
a sparse member dies of SIGXFSZ instead of filling the disk, and the test fails on its exit.
"""

from __future__ import annotations

import io
import resource
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import intentlog
from intentlog.bundle import TAR_ROOT, export_bundle

VERIFIER = Path(intentlog.__file__).parent / "verify_bundle.py"
LIMIT = 1 << 20
REALSIZE = 3 << 30  # 3 GiB of holes


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


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def run_both(path: Path, tmp: Path) -> list[subprocess.CompletedProcess[str]]:
    """``intentlog verify --bundle`` and ``verify_bundle.py`` over ``path``, each unable to write a file > 1 MiB."""
    env = {"TMPDIR": str(tmp), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    argvs = [
        [sys.executable, "-m", "intentlog.cli", "verify", "--bundle", str(path)],
        [sys.executable, str(VERIFIER), str(path)],
    ]
    return [subprocess.run(a, capture_output=True, text=True, timeout=120, preexec_fn=_limited, env=env) for a in argvs]


def _rewrite(tar: Path, out: Path, extra: Callable[[tarfile.TarFile], None]) -> Path:
    """A copy of ``tar`` with ``extra`` adding members right after ``intentlog.json``."""
    with tarfile.open(tar) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isreg() else None)
            if m.name == f"{TAR_ROOT}/intentlog.json":
                extra(dst)
    return out


def _sparse_10(dst: tarfile.TarFile) -> None:
    """GNU sparse 1.0: a pax header naming the real size, a regular member whose data opens with the map."""
    name = f"{TAR_ROOT}/objects/zz/bomb"
    sparse_map = f"1\n{REALSIZE - 1}\n1\n".encode().ljust(tarfile.BLOCKSIZE, b"\0")
    data = sparse_map + b"x"
    info = tarfile.TarInfo(f"{TAR_ROOT}/objects/zz/GNUSparseFile.0/bomb")
    info.size = len(data)
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(REALSIZE),
    }
    dst.addfile(info, io.BytesIO(data))


def _sparse_01(dst: tarfile.TarFile) -> None:
    """GNU sparse 0.1: the map and the real size in pax keys."""
    info = tarfile.TarInfo(f"{TAR_ROOT}/objects/zz/bomb")
    info.size = 1
    info.pax_headers = {
        "GNU.sparse.numblocks": "1",
        "GNU.sparse.map": f"{REALSIZE - 1},1",
        "GNU.sparse.size": str(REALSIZE),
        "GNU.sparse.name": f"{TAR_ROOT}/objects/zz/bomb",
    }
    dst.addfile(info, io.BytesIO(b"x"))


def _chksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)


def _old_gnu_sparse(tar: Path, out: Path) -> Path:
    """An old GNU sparse member (type 'S'): the map and the real size in the header block itself."""
    info = tarfile.TarInfo(f"{TAR_ROOT}/objects/zz/bomb")
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 1
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
    header[386:398] = b"%011o\0" % (REALSIZE - 1)  # the one hole-less piece: its offset
    header[398:410] = b"%011o\0" % 1  # and its size
    header[483:495] = b"%011o\0" % REALSIZE  # the real size
    _chksum(header)
    body = tar.read_bytes()
    # the plain members end before the two zero blocks that close the archive: put the bomb first
    bomb = bytes(header) + b"x".ljust(tarfile.BLOCKSIZE, b"\0")
    out.write_bytes(bomb + body)
    return out


def _size_beyond_manifest(dst: tarfile.TarFile) -> None:
    """No sparse trick: a plain member of 2 MiB that hashes.json does not declare."""
    data = b"\0" * (2 << 20)
    info = tarfile.TarInfo(f"{TAR_ROOT}/objects/zz/big")
    info.size = len(data)
    dst.addfile(info, io.BytesIO(data))


BOMBS: dict[str, Callable[[Path, Path], Path]] = {
    "GNU sparse 1.0 (pax, regular type)": lambda t, o: _rewrite(t, o, _sparse_10),
    "GNU sparse 0.1 (pax keys)": lambda t, o: _rewrite(t, o, _sparse_01),
    "old GNU sparse (type S)": _old_gnu_sparse,
}


def test_a_sparse_member_really_expands_in_tarfile(tar: Path, tmp_path: Path) -> None:
    """The forged tars are what they claim: tarfile reads each bomb member as 3 GiB from a few KiB."""
    for name, build in BOMBS.items():
        forged = build(tar, tmp_path / "forged.tar")
        assert forged.stat().st_size < 256 << 10, name
        with tarfile.open(forged) as tf:
            bomb = [m for m in tf.getmembers() if m.name.endswith("/bomb")]
            assert bomb and bomb[0].size == REALSIZE, name
        forged.unlink()


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_sparse_member_is_refused_before_anything_is_written(name: str, tar: Path, tmp_path: Path) -> None:
    """Both verifiers refuse the tar, name the sparse member, and write nothing near its real size."""
    forged = BOMBS[name](tar, tmp_path / "forged.tar")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for p in run_both(forged, scratch):
        assert p.returncode == 1, (p.args, p.returncode, p.stdout, p.stderr)
        said = (p.stdout + p.stderr).replace(str(tmp_path), "TMP")
        assert "is a sparse file" in said and "objects/zz/bomb" in said, (p.args, said)
        assert "Traceback" not in p.stdout + p.stderr
    assert list(scratch.iterdir()) == []


def test_a_member_larger_than_the_manifest_declares_is_refused(tar: Path, tmp_path: Path) -> None:
    """A member hashes.json does not list (or lists smaller) is refused before it is written."""
    forged = _rewrite(tar, tmp_path / "forged.tar", _size_beyond_manifest)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for p in run_both(forged, scratch):
        assert p.returncode == 1, (p.args, p.returncode, p.stdout, p.stderr)
        assert "hashes.json" in p.stdout + p.stderr, (p.args, p.stdout, p.stderr)
        assert "Traceback" not in p.stdout + p.stderr


def test_a_listed_member_grown_beyond_its_declared_size_is_refused(tar: Path, tmp_path: Path) -> None:
    """hashes.json declares each file's size: a listed member carrying more bytes is refused, not extracted."""
    out = tmp_path / "forged.tar"
    with tarfile.open(tar) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isreg() else None  # type: ignore[union-attr]
            if m.name == f"{TAR_ROOT}/intentlog.json":
                assert data is not None
                data += b" " * (2 << 20)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    with tarfile.open(out) as tf:
        listed = orjson.loads(tf.extractfile(f"{TAR_ROOT}/hashes.json").read())  # type: ignore[union-attr]
    assert "intentlog.json" in listed["files"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for p in run_both(out, scratch):
        assert p.returncode == 1, (p.args, p.returncode, p.stdout, p.stderr)
        assert "hashes.json" in p.stdout + p.stderr and "intentlog.json" in p.stdout + p.stderr
