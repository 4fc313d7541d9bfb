"""The artifact store, inline payloads and workspace records (DESIGN §3, §4 rules 3, 6, 8).

Every test reads back what is on disk: object files, their modes, quarantine/ and tmp/.
"""

from __future__ import annotations

import ast
import io
import os
import stat
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog.artifacts.store as store_module
from intentlog._internal.fsutil import publish_bytes
from intentlog.artifacts import (
    INLINE_MAX,
    ArtifactStore,
    Ref,
    capture_locator,
    inline_bytes,
    inline_ref,
)
from intentlog.errors import (
    ArtifactError,
    ArtifactMissing,
    DigestMismatch,
    InvalidDigest,
    OutsideWorkspace,
)

CHUNK = store_module.CHUNK_SIZE
WINDOW = store_module.MMAP_WINDOW


# -- helpers -------------------------------------------------------------------------------


def digest_of(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def snapshot(root: Path) -> dict[str, tuple[int, float, bytes | None]]:
    """Every entry under ``root``: mode, mtime and (for files) bytes."""
    out: dict[str, tuple[int, float, bytes | None]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = os.lstat(p)
            data = p.read_bytes() if stat.S_ISREG(st_.st_mode) else None
            out[str(p.relative_to(root))] = (st_.st_mode, st_.st_mtime, data)
    return out


def object_files(root: Path) -> list[Path]:
    objects = root / "objects"
    if not objects.exists():
        return []
    return sorted(p for p in objects.rglob("*") if p.is_file())


def corrupt(path: Path, *, offset: int = 0) -> None:
    """Flip one byte of a read-only object in place, as bit rot would."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def pattern(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes, cheaply."""
    block = blake3(seed.to_bytes(8, "little")).digest(length=min(size, 1 << 16) or 1)
    return (block * (size // len(block) + 1))[:size] if size else b""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture
def store(root: Path) -> ArtifactStore:
    return ArtifactStore(root)


# -- put / get -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=20_000))
def test_put_get_round_trip(data: bytes) -> None:
    """put returns the digest of the exact bytes, and get gives them back from disk."""
    with tempfile.TemporaryDirectory() as d:
        s = ArtifactStore(Path(d) / "ledger")
        ref = s.put(data, media_type="application/octet-stream")
        assert ref == Ref(digest_of(data), len(data), "application/octet-stream")
        assert s.get(ref.digest) == data
        assert s.path_for(ref.digest).read_bytes() == data
        # a second store on the same folder (another handle, as another process would) reads it too
        assert ArtifactStore(Path(d) / "ledger").get(ref.digest) == data


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), repeats=st.integers(min_value=2, max_value=4))
def test_same_bytes_same_digest_one_object(data: bytes, repeats: int) -> None:
    """Putting the same bytes again gives the same ref and leaves exactly one read-only object."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "ledger"
        s = ArtifactStore(root)
        refs = {s.put(data) for _ in range(repeats)}
        refs.add(s.put(bytearray(data)))  # type: ignore[arg-type]
        assert len(refs) == 1
        files = object_files(root)
        assert len(files) == 1
        (ref,) = refs
        hexdigest = ref.digest.removeprefix("blake3:")
        assert files[0] == root / "objects" / hexdigest[:2] / hexdigest[2:]
        assert stat.S_IMODE(files[0].stat().st_mode) == 0o444
        assert files[0].read_bytes() == data
        assert list((root / "tmp").iterdir()) == []


def test_put_layout_and_durable_dirs(store: ArtifactStore, root: Path) -> None:
    """put creates objects/<2 hex>/<62 hex>, leaves tmp/ empty and no quarantine."""
    ref = store.put(b"hello")
    assert ref.to_json() == {"digest": digest_of(b"hello"), "size": 5}
    assert store.path_for(ref.digest) == root.absolute() / "objects" / ref.digest[7:9] / ref.digest[9:]
    assert sorted(p.name for p in root.iterdir()) == ["objects", "tmp"]
    assert list((root / "tmp").iterdir()) == []
    assert store.size_of(ref.digest) == 5
    assert store.exists(ref.digest)
    assert list(store.iter_digests()) == [ref.digest]


def test_put_refuses_text(store: ArtifactStore, root: Path) -> None:
    """put takes bytes; a str is a TypeError and nothing is created."""
    with pytest.raises(TypeError, match="encode text first"):
        store.put("hello")  # type: ignore[arg-type]
    assert not root.exists()


def test_readers_create_nothing(store: ArtifactStore, root: Path) -> None:
    """Reading a store that was never written leaves the folder absent."""
    d = digest_of(b"absent")
    with pytest.raises(ArtifactMissing, match="is not in the store"):
        store.get(d)
    with pytest.raises(ArtifactMissing):
        store.open(d)
    with pytest.raises(ArtifactMissing):
        store.verify(d)
    with pytest.raises(ArtifactMissing):
        store.size_of(d)
    assert not store.exists(d)
    assert list(store.iter_digests()) == []
    assert not root.exists()


def test_existing_folders_are_used(root: Path) -> None:
    """A ledger that already made objects/, tmp/ and quarantine/ is used as it is."""
    for name in ("objects", "tmp", "quarantine"):
        (root / name).mkdir(parents=True)
    ref = ArtifactStore(root).put(b"x")
    assert ArtifactStore(root).get(ref.digest) == b"x"
    assert sorted(p.name for p in root.iterdir()) == ["objects", "quarantine", "tmp"]


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, WINDOW, WINDOW + 1, 2 * WINDOW + 3])
def test_put_file_chunk_and_window_boundaries(store: ArtifactStore, root: Path, tmp_path: Path, size: int) -> None:
    """put_file, get, open and verify agree with in-memory hashing at every boundary."""
    data = pattern(size, seed=size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    ref = store.put_file(src, media_type="application/x-test")
    assert ref == Ref(digest_of(data), size, "application/x-test")
    assert store.put(data).digest == ref.digest
    assert store.path_for(ref.digest).read_bytes() == data
    assert store.get(ref.digest) == data
    with store.open(ref.digest) as f:
        assert f.read() == data
    assert store.verify(ref.digest) is True
    assert len(object_files(root)) == 1
    assert list((root / "tmp").iterdir()) == []


def test_put_file_missing_or_not_regular(store: ArtifactStore, root: Path, tmp_path: Path) -> None:
    """put_file of a missing path, a directory or a FIFO raises ArtifactError and stores nothing."""
    with pytest.raises(ArtifactError, match="no such file"):
        store.put_file(tmp_path / "nope")
    with pytest.raises(ArtifactError, match="not a regular file"):
        store.put_file(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError, match="not a regular file"):
        store.put_file(fifo)  # must not block waiting for a writer
    assert object_files(root) == []


def test_write_failure_is_translated(root: Path) -> None:
    """An OSError while publishing becomes one ArtifactError naming the digest, chained, with no debris."""
    root.mkdir()
    (root / "tmp").write_bytes(b"not a directory")
    s = ArtifactStore(root)
    with pytest.raises(ArtifactError, match=r"cannot store blake3:[0-9a-f]{64} at .*put it again") as info:
        s.put(b"payload")
    assert isinstance(info.value.__cause__, OSError)
    assert object_files(root) == []
    assert (root / "tmp").read_bytes() == b"not a directory"


# -- refs --------------------------------------------------------------------------------------


def test_ref_json_round_trip() -> None:
    """to_json gives the event form (media_type only when set) and from_json reads it back."""
    d = digest_of(b"a")
    assert Ref(d, 1).to_json() == {"digest": d, "size": 1}
    assert Ref(d, 1, "text/plain").to_json() == {"digest": d, "size": 1, "media_type": "text/plain"}
    for ref in (Ref(d, 1), Ref(d, 1, "text/plain")):
        assert Ref.from_json(orjson.loads(orjson.dumps(ref.to_json()))) == ref
    # the inline keys of an inline ref are ignored
    assert Ref.from_json(inline_ref(b"a")) == Ref(d, 1)


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        ({"digest": "blake3:" + "A" * 64, "size": 1}, InvalidDigest),
        ({"digest": "sha256:" + "a" * 64, "size": 1}, InvalidDigest),
        ({"digest": 7, "size": 1}, InvalidDigest),
        ({"digest": digest_of(b"a")}, ArtifactError),
        ({"size": 1}, ArtifactError),
        ({"digest": digest_of(b"a"), "size": -1}, ArtifactError),
        ({"digest": digest_of(b"a"), "size": True}, ArtifactError),
        ({"digest": digest_of(b"a"), "size": "1"}, ArtifactError),
        ({"digest": digest_of(b"a"), "size": 1.0}, ArtifactError),
        ({"digest": digest_of(b"a"), "size": 1, "media_type": 3}, ArtifactError),
        ([("digest", digest_of(b"a"))], ArtifactError),
    ],
)
def test_ref_from_json_refuses_bad_shapes(obj: object, error: type[Exception]) -> None:
    """from_json refuses every malformed ref with a library error."""
    with pytest.raises(error):
        Ref.from_json(obj)  # type: ignore[arg-type]


def test_ref_constructor_validates() -> None:
    """A Ref cannot be built with a bad digest or size, and is immutable."""
    with pytest.raises(InvalidDigest):
        Ref("blake3:xyz", 1)
    with pytest.raises(ArtifactError):
        Ref(digest_of(b""), -5)
    ref = Ref(digest_of(b""), 0)
    with pytest.raises(AttributeError):
        ref.size = 3  # type: ignore[misc]


# -- bad digests -------------------------------------------------------------------------------

BAD_DIGESTS = [
    "blake3:../../etc",
    "blake3:../../etc/passwd" + "0" * 41,
    "blake3:" + "AB" * 32,
    "blake3:" + "a" * 63,
    "blake3:" + "a" * 65,
    "blake3:" + "a" * 64 + "\n",
    "blake3:" + "a" * 62 + "/.",
    "sha256:" + "a" * 64,
    "a" * 64,
    "",
    "blake3:",
]


@pytest.mark.parametrize("bad", BAD_DIGESTS)
def test_bad_digest_refused_before_touching_disk(root: Path, bad: str) -> None:
    """Every method refuses a malformed digest with InvalidDigest, before building a path:
    the folder's bytes are unchanged and the inline hook is never asked."""
    asked: list[str] = []

    def lookup(digest: str) -> bytes | None:
        asked.append(digest)
        return None

    s = ArtifactStore(root, inline_lookup=lookup)
    s.put(b"existing")
    before = snapshot(root)
    for method in (s.get, s.open, s.exists, s.verify, s.path_for, s.size_of):
        with pytest.raises(InvalidDigest) as info:
            method(bad)
        assert isinstance(info.value, ValueError)
        assert repr(bad) in str(info.value)
    assert snapshot(root) == before
    assert asked == []


# -- corruption, quarantine, repair ---------------------------------------------------------------


def test_corrupt_object_detected_quarantined_and_restored(store: ArtifactStore, root: Path) -> None:
    """A flipped byte makes get and open raise DigestMismatch; verify moves the object to
    quarantine/ (keeping its bytes) and raises; putting the bytes again restores it."""
    data = b"the response body " * 100
    ref = store.put(data)
    path = store.path_for(ref.digest)
    corrupt(path, offset=7)
    bad_bytes = path.read_bytes()
    with pytest.raises(DigestMismatch) as info:
        store.get(ref.digest)
    assert info.value.digest == ref.digest
    assert info.value.actual == digest_of(bad_bytes)
    assert str(path) in str(info.value)
    with pytest.raises(DigestMismatch), store.open(ref.digest) as f:
        f.read()
    assert path.read_bytes() == bad_bytes  # readers change nothing

    with pytest.raises(DigestMismatch, match=r"moved to .*quarantine") as info:
        store.verify(ref.digest)
    assert not path.exists()
    quarantined = list((root / "quarantine").iterdir())
    assert len(quarantined) == 1
    assert quarantined[0].read_bytes() == bad_bytes
    assert quarantined[0].name.startswith("blake3-" + ref.digest[7:])
    assert not store.exists(ref.digest)
    with pytest.raises(ArtifactMissing):
        store.verify(ref.digest)

    assert store.put(data) == ref
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert store.verify(ref.digest) is True
    assert store.get(ref.digest) == data
    assert len(list((root / "quarantine").iterdir())) == 1  # nothing deleted


def test_corrupt_large_object_verify(store: ArtifactStore, root: Path, tmp_path: Path) -> None:
    """verify hashes large objects through mmap windows and still sees a flipped last byte."""
    data = pattern(WINDOW + 12345, seed=3)
    src = tmp_path / "big"
    src.write_bytes(data)
    ref = store.put_file(src)
    path = store.path_for(ref.digest)
    corrupt(path, offset=len(data) - 1)
    with pytest.raises(DigestMismatch):
        store.verify(ref.digest)
    assert not path.exists()
    assert store.put_file(src) == ref
    assert store.verify(ref.digest)
    assert path.read_bytes() == data


def test_verify_leaves_an_object_repaired_meanwhile(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If another process quarantines and re-puts a corrupt object while verify is hashing it,
    verify reports the bytes it read but does not move the good replacement away."""
    data = b"good bytes " * 40
    ref = store.put(data)
    path = store.path_for(ref.digest)
    corrupt(path)
    real_hash = store_module._hash_fd

    def hash_then_other_process_repairs(fd: int, size: int) -> str:
        actual = real_hash(fd, size)
        os.rename(path, root / "elsewhere")
        ArtifactStore(root).put(data)
        return actual

    monkeypatch.setattr(store_module, "_hash_fd", hash_then_other_process_repairs)
    with pytest.raises(DigestMismatch) as info:
        store.verify(ref.digest)
    assert "moved to" not in str(info.value)
    monkeypatch.undo()
    assert path.read_bytes() == data
    assert store.verify(ref.digest) is True
    assert not (root / "quarantine").exists()


@pytest.mark.parametrize("use_file", [False, True])
def test_wrong_size_object_is_replaced(store: ArtifactStore, root: Path, tmp_path: Path, use_file: bool) -> None:
    """An existing object of the wrong size is corrupt: put quarantines it and publishes the good bytes."""
    data = b"0123456789" * 50
    d = digest_of(data)
    path = store.path_for(d)
    path.parent.mkdir(parents=True)
    path.write_bytes(data[:-3])
    if use_file:
        src = tmp_path / "src"
        src.write_bytes(data)
        ref = store.put_file(src)
    else:
        ref = store.put(data)
    assert ref.digest == d
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    (q,) = (root / "quarantine").iterdir()
    assert q.read_bytes() == data[:-3]
    assert list((root / "tmp").iterdir()) == []


def test_symlink_in_objects_is_not_followed(store: ArtifactStore, root: Path, tmp_path: Path) -> None:
    """A symlink planted at an object's name is never read through; put replaces it."""
    data = b"secret?"
    d = digest_of(data)
    outside = tmp_path / "outside"
    outside.write_bytes(data)
    path = store.path_for(d)
    path.parent.mkdir(parents=True)
    path.symlink_to(outside)
    with pytest.raises(ArtifactError, match="symbolic link"):
        store.get(d)
    assert not store.exists(d)
    store.put(data)
    assert not path.is_symlink()
    assert path.read_bytes() == data
    assert outside.read_bytes() == data


@pytest.mark.parametrize("use_file", [False, True])
def test_reput_refreshes_mtime_without_rewriting(
    store: ArtifactStore, root: Path, tmp_path: Path, use_file: bool
) -> None:
    """Putting existing content is a no-op that restarts the GC grace period (mtime) and keeps the inode."""
    data = b"keep me" * 10
    ref = store.put(data)
    path = store.path_for(ref.digest)
    os.utime(path, (1_000_000, 1_000_000))
    inode = path.stat().st_ino
    before = time.time()
    if use_file:
        src = tmp_path / "src"
        src.write_bytes(data)
        again = store.put_file(src)
    else:
        again = store.put(data)
    assert again == ref
    st_ = path.stat()
    assert st_.st_ino == inode
    assert st_.st_mtime >= before - 2
    assert list((root / "tmp").iterdir()) == []
    assert not (root / "quarantine").exists()


def test_lost_race_with_right_size_is_success(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another writer links the same object between our check and our link, put succeeds."""
    real = publish_bytes

    def racing_publish(data: bytes, dest: str | os.PathLike[str], **kw: object) -> bool:
        assert real(data, dest, **kw)  # type: ignore[arg-type]  # the other process wins
        return real(data, dest, **kw)  # type: ignore[arg-type]  # ours finds the name taken

    monkeypatch.setattr(store_module, "publish_bytes", racing_publish)
    ref = store.put(b"raced")
    assert store.path_for(ref.digest).read_bytes() == b"raced"
    assert len(object_files(root)) == 1
    assert list((root / "tmp").iterdir()) == []
    assert not (root / "quarantine").exists()


def test_lost_race_with_wrong_size_is_repaired(
    store: ArtifactStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the object that wins the race has the wrong size, it is quarantined and ours published."""
    real = publish_bytes
    calls: list[int] = []

    def racing_publish(data: bytes, dest: str | os.PathLike[str], **kw: object) -> bool:
        calls.append(1)
        if len(calls) == 1:
            assert real(data[:-1], dest, **kw)  # type: ignore[arg-type]
        return real(data, dest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "publish_bytes", racing_publish)
    ref = store.put(b"raced!")
    assert store.path_for(ref.digest).read_bytes() == b"raced!"
    assert [p.read_bytes() for p in (root / "quarantine").iterdir()] == [b"raced"]
    assert len(calls) == 2


# -- open ------------------------------------------------------------------------------------


def test_open_reads_and_closes(store: ArtifactStore) -> None:
    """open() gives a read-only binary file with the exact bytes, in any read pattern."""
    data = pattern(300_000, seed=9)
    ref = store.put(data)
    with store.open(ref.digest) as f:
        assert f.readable()
        assert not f.writable()
        parts = []
        while chunk := f.read(7777):
            parts.append(chunk)
        assert b"".join(parts) == data
    assert f.closed
    with store.open(ref.digest) as f:
        f.seek(1000)
        assert f.read(10) == data[1000:1010]
        f.seek(0)
        assert f.read() == data
    with store.open(ref.digest) as f:
        assert isinstance(f, io.BufferedIOBase)
        assert f.readinto(bytearray(10)) == 10
        assert f.read() == data[10:]
    with pytest.raises(io.UnsupportedOperation), store.open(ref.digest) as f:
        f.write(b"x")


@pytest.mark.parametrize("size", [10, 100_000, WINDOW + 1])
@pytest.mark.parametrize("how", ["read_all", "chunks", "seek_then_read", "exact_size"])
def test_open_raises_on_corrupt_object_at_eof(store: ArtifactStore, tmp_path: Path, size: int, how: str) -> None:
    """Reading a corrupted object to its end raises DigestMismatch, whatever the read pattern."""
    data = pattern(size, seed=size)
    src = tmp_path / "src"
    src.write_bytes(data)
    ref = store.put_file(src)
    corrupt(store.path_for(ref.digest), offset=size // 2)
    with pytest.raises(DigestMismatch) as info, store.open(ref.digest) as f:
        if how == "read_all":
            f.read()
        elif how == "chunks":
            while f.read(4096):
                pass
        elif how == "seek_then_read":
            f.seek(size - 5)
            f.read()
        else:
            f.read(size)
    assert info.value.digest == ref.digest
    assert info.value.actual == digest_of(store.path_for(ref.digest).read_bytes())


def test_open_sound_object_after_seeks(store: ArtifactStore) -> None:
    """Out-of-order reads of a sound object do not raise: the EOF check re-hashes it."""
    data = pattern(200_000, seed=1)
    ref = store.put(data)
    with store.open(ref.digest) as f:
        f.seek(150_000)
        assert f.read() == data[150_000:]
        f.seek(0)
        assert f.read(10) == data[:10]


# -- inline payloads and the inline hook ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.one_of(st.binary(max_size=INLINE_MAX), st.text(max_size=1000).map(str.encode)))
def test_inline_round_trip_through_orjson(data: bytes) -> None:
    """inline_ref -> orjson dumps/loads -> inline_bytes gives the exact bytes, and re-encoding
    the loaded ref gives the same JSON bytes (so event hashes are stable)."""
    ref = inline_ref(data)
    encoded = orjson.dumps(ref, option=orjson.OPT_SORT_KEYS)
    loaded = orjson.loads(encoded)
    assert orjson.dumps(loaded, option=orjson.OPT_SORT_KEYS) == encoded
    assert inline_bytes(loaded) == data
    assert loaded["digest"] == digest_of(data)
    assert loaded["size"] == len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert "inline" not in loaded
        assert isinstance(loaded["inline_b64"], str)
    else:
        assert loaded["inline"] == text
        assert "inline_b64" not in loaded


def test_inline_ref_forms_and_limit() -> None:
    """Valid UTF-8 rides as a string, other bytes as base64; more than INLINE_MAX is refused."""
    assert inline_ref(b"hi", media_type="text/plain") == {
        "digest": digest_of(b"hi"),
        "size": 2,
        "media_type": "text/plain",
        "inline": "hi",
    }
    # an encoded surrogate is not valid UTF-8, so it goes as base64
    assert "inline_b64" in inline_ref(b"\xed\xa0\x80")
    assert inline_ref(b"\xff")["inline_b64"] == "/w=="
    assert inline_bytes(inline_ref(b"x" * INLINE_MAX)) == b"x" * INLINE_MAX
    with pytest.raises(ValueError, match="INLINE_MAX"):
        inline_ref(b"x" * (INLINE_MAX + 1))
    assert inline_bytes({"digest": digest_of(b"a"), "size": 1}) is None


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        ({"inline": "hello!"}, DigestMismatch, "inline payload"),
        ({"size": 4}, DigestMismatch, "ref says size 4"),
        ({"size": "5"}, DigestMismatch, "ref says size '5'"),
        ({"inline_b64": "aGVsbG8="}, ArtifactError, "both"),
        ({"inline": 5}, ArtifactError, "must be a string"),
        ({"inline": "hell\ud800"}, ArtifactError, "surrogate"),
        ({"digest": "blake3:nope"}, InvalidDigest, "invalid digest"),
    ],
)
def test_inline_bytes_refuses_tampering(edit: dict[str, object], error: type[Exception], match: str) -> None:
    """An inline payload that does not match its digest or size, or is malformed, is refused."""
    ref = {**inline_ref(b"hello"), **edit}
    with pytest.raises(error, match=match):
        inline_bytes(ref)


@pytest.mark.parametrize("b64", ["not base64!", "////", 5])
def test_inline_bytes_refuses_bad_base64(b64: object) -> None:
    """Malformed or mismatched base64 payloads are refused with a library error."""
    ref = {**inline_ref(b"\xff\xfe"), "inline_b64": b64}
    with pytest.raises(ArtifactError):
        inline_bytes(ref)


def test_inline_lookup_hook(root: Path) -> None:
    """get/open/exists/verify/size_of find inline payloads via the hook, which is asked only
    when objects/ lacks the digest, and whose bytes are checked like a stored object."""
    inline = {digest_of(b"small"): b"small", digest_of(b"liar"): b"not liar"}
    asked: list[str] = []

    def lookup(digest: str) -> bytes | None:
        asked.append(digest)
        return inline.get(digest)

    s = ArtifactStore(root, inline_lookup=lookup)
    d = digest_of(b"small")
    assert s.get(d) == b"small"
    with s.open(d) as f:
        assert f.read() == b"small"
    assert s.exists(d)
    assert s.verify(d) is True
    assert s.size_of(d) == 5
    assert asked == [d] * 5
    assert not root.exists()  # reading inline payloads writes nothing

    with pytest.raises(DigestMismatch, match="inline payload"):
        s.get(digest_of(b"liar"))
    with pytest.raises(DigestMismatch):
        s.verify(digest_of(b"liar"))
    with pytest.raises(ArtifactMissing):
        s.get(digest_of(b"neither"))

    asked.clear()
    ref = s.put(b"stored")
    assert s.get(ref.digest) == b"stored"
    assert s.exists(ref.digest)
    assert s.verify(ref.digest)
    assert asked == []


# -- iteration ---------------------------------------------------------------------------------


def test_iter_digests_streams_objects_only(store: ArtifactStore, root: Path) -> None:
    """iter_digests yields every object's digest once, sorted, skipping stray files."""
    refs = [store.put(bytes([i]) * i) for i in range(50)]
    (root / "objects" / "README").write_text("stray")
    (root / "objects" / "zz").mkdir()
    (root / "objects" / refs[0].digest[7:9] / "short").write_text("stray")
    got = store.iter_digests()
    assert iter(got) is got  # a generator, not a list
    assert list(got) == sorted(r.digest for r in refs)


# -- workspace records ---------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "f.txt").write_bytes(b"version 1\n")
    return ws


@pytest.mark.parametrize(
    "locator", ["../x", "/etc/passwd", "sub/../../x", "..", "./../ws/sub/f.txt", "link_out", "dir_out/passwd"]
)
def test_capture_refuses_escapes(root: Path, workspace: Path, tmp_path: Path, locator: str) -> None:
    """Locators that are absolute, escape with '..', or lead out through a symlink are refused
    with OutsideWorkspace, and the ledger folder is left untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_bytes(b"root:x:0:0")
    (tmp_path / "x").write_bytes(b"x")
    (workspace / "link_out").symlink_to(outside / "passwd")
    (workspace / "dir_out").symlink_to(outside)
    s = ArtifactStore(root)
    s.put(b"before")
    before = snapshot(root)
    with pytest.raises(OutsideWorkspace) as info:
        capture_locator(s, workspace, locator)
    assert isinstance(info.value, ValueError)
    assert info.value.locator == locator
    assert snapshot(root) == before


@pytest.mark.parametrize("locator", ["../x", "/etc/passwd", "a/../../x", "//x"])
def test_capture_refuses_lexical_escapes_without_looking(root: Path, tmp_path: Path, locator: str) -> None:
    """Absolute and '..'-escaping locators are refused from their text alone: even with a
    workspace that does not exist, the error is OutsideWorkspace and nothing is created."""
    with pytest.raises(OutsideWorkspace):
        capture_locator(ArtifactStore(root), tmp_path / "no-such-workspace", locator)
    assert not root.exists()


def test_capture_records_versions(root: Path, workspace: Path) -> None:
    """Recording a file, changing it and recording again keeps both versions retrievable."""
    s = ArtifactStore(root)
    loc1, ref1 = capture_locator(s, workspace, "./sub//f.txt", media_type="text/plain")
    assert loc1 == "sub/f.txt"
    assert ref1 == Ref(digest_of(b"version 1\n"), 10, "text/plain")
    (workspace / "sub" / "f.txt").write_bytes(b"version 2, longer\n")
    loc2, ref2 = capture_locator(s, str(workspace), "sub/f.txt")
    assert loc2 == "sub/f.txt"
    assert ref2.digest != ref1.digest
    assert s.get(ref1.digest) == b"version 1\n"
    assert s.get(ref2.digest) == b"version 2, longer\n"
    assert len(object_files(root)) == 2


def test_capture_follows_links_inside(root: Path, workspace: Path) -> None:
    """A symlink that stays inside the workspace is followed; the recorded locator is the one given."""
    (workspace / "alias").symlink_to("sub")
    (workspace / "file_alias").symlink_to(workspace / "sub" / "f.txt")
    s = ArtifactStore(root)
    assert capture_locator(s, workspace, "alias/f.txt")[0] == "alias/f.txt"
    loc, ref = capture_locator(s, workspace, "file_alias")
    assert loc == "file_alias"
    assert s.get(ref.digest) == b"version 1\n"
    assert capture_locator(s, workspace, "sub/../sub/f.txt")[0] == "sub/f.txt"


@pytest.mark.parametrize("locator", ["sub/missing.txt", "nodir/f.txt", "sub", "", ".", "sub/.."])
def test_capture_missing_or_not_a_file(root: Path, workspace: Path, locator: str) -> None:
    """A missing file, a directory or the workspace itself raises ArtifactError (not
    OutsideWorkspace, not ArtifactMissing) naming the locator and workspace; nothing is stored."""
    s = ArtifactStore(root)
    with pytest.raises(ArtifactError) as info:
        capture_locator(s, workspace, locator)
    assert type(info.value) is ArtifactError
    assert repr(locator) in str(info.value) or locator in str(info.value)
    assert str(workspace) in str(info.value)
    assert object_files(root) == []


def test_capture_missing_workspace(root: Path, tmp_path: Path) -> None:
    """A workspace that does not exist is an ArtifactError naming it."""
    with pytest.raises(ArtifactError, match="does not exist"):
        capture_locator(ArtifactStore(root), tmp_path / "nope", "f")
    assert not root.exists()


def test_capture_fifo_does_not_hang(root: Path, workspace: Path) -> None:
    """A FIFO in the workspace is refused as not a regular file instead of blocking."""
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ArtifactError, match="not a regular file"):
        capture_locator(ArtifactStore(root), workspace, "pipe")


# -- layering ------------------------------------------------------------------------------------


def test_artifacts_import_nothing_above_them() -> None:
    """artifacts/ imports only its own modules and the foundation (errors and the file and digest helpers)."""
    pkg = Path(store_module.__file__).parent
    helpers = ("digest", "fsutil", "nofollow", "procs", "regular", "args")
    foundation = {"errors", *(f"_internal.{h}" for h in helpers)}
    allowed = foundation | {p.stem for p in pkg.glob("*.py")}
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                parts = (node.module or "").split(".")
                mod = ".".join(parts[:2]) if parts[0] == "_internal" else parts[0]
                assert mod in allowed, f"{path.name} imports .{'.' * (node.level - 1)}{node.module}"
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    assert not name.startswith("intentlog"), f"{path.name} imports {name}"
