"""A power-loss simulator for the folder storage: record every file-system call, build crash states.

Not a test module. :class:`Recorder` wraps every function of :mod:`intentlog._internal.fsops` (the one
place the folder implementations and ``_fsutil`` create, write, sync, link, rename, truncate
and remove files) and logs, in order, what each call did to a ledger folder: per file
(by inode: writes, truncations, syncs) and per directory (creates, links, renames, unlinks,
mkdirs, directory syncs). Tests add *marks* to the same timeline: an append that returned
(``ack``), a provider that received a request (``receipt``: the provider is another machine,
its log is outside the crash model).

:func:`explore` replays the log up to every point and builds the on-disk states a power cut
there may leave, under this model (docs/streams.md, "Power loss"):

- a file's bytes written since its last ``fsync``/``fdatasync`` may be lost, kept, cut
  anywhere in between (at record ends, mid-record, at page boundaries), or garbled (zeros or
  random bytes) from the start of their last page on; synced bytes are kept;
- a directory operation (a new name, a link, a rename, an unlink, a mkdir) is durable once
  every directory it touches has been fsynced after it; until then it may be undone, each
  independently of the others (the file's bytes live on under its other names);
- what was there before the recording started is durable;
- the machine restarts after the cut: the pids in staging names (``put.<pid>.…``,
  ``.<name>.<pid>.….tmp``) belong to no live process any more.

All the states of a point are tried when they are few (``cap``); a seeded sample otherwise.
States already tried with the same marks behind them are skipped. Each state is written to
a fresh folder and handed to the caller's check, which runs the library's own recovery and
returns the invariants it found broken.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import intentlog._internal.fsops as fsops

PAGE = 4096
SEED = int(os.environ.get("INTENTLOG_CRASH_SEED", "2126"))
#: states tried per crash point before sampling; INTENTLOG_CRASH_SAMPLE raises the sample size
CAP = int(os.environ.get("INTENTLOG_CRASH_CAP", "256"))
SAMPLE = int(os.environ.get("INTENTLOG_CRASH_SAMPLE", "12"))

Op = tuple[Any, ...]


@dataclass
class Mark:
    at: int  # number of recorded operations when it happened
    kind: str
    data: dict[str, Any]


@dataclass
class Recorder:
    """Records the file-system calls that reach ``root`` (see the module doc)."""

    root: Path
    ops: list[Op] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    base_dirs: dict[str, dict[str, tuple[str, Any]]] = field(default_factory=dict)
    base_files: dict[int, bytes] = field(default_factory=dict)
    _ino: dict[tuple[int, int], int] = field(default_factory=dict)
    _next_mid: int = 0
    _saved: dict[str, Any] = field(default_factory=dict)
    #: a planted mistake: called with (op name, the op) before recording; True drops the call
    drop: Callable[[str, Op], bool] | None = None

    def __post_init__(self) -> None:
        self.root = Path(os.path.realpath(self.root))

    # -- the timeline --------------------------------------------------------------

    def mark(self, kind: str, **data: Any) -> None:
        self.marks.append(Mark(len(self.ops), kind, data))

    def _mid(self) -> int:
        self._next_mid += 1
        return self._next_mid

    def snapshot(self) -> None:
        """What is in ``root`` now: the durable starting state."""
        self.base_dirs, self.base_files, self._ino = {}, {}, {}
        for here, dirs, files in os.walk(self.root):
            rel = self._rel(here) or ""
            entries: dict[str, tuple[str, Any]] = {}
            for d in dirs:
                if os.path.islink(os.path.join(here, d)):
                    continue
                entries[d] = ("d", _join(rel, d))
            for f in files:
                p = os.path.join(here, f)
                st = os.lstat(p)
                if not stat.S_ISREG(st.st_mode):
                    continue
                key = (st.st_dev, st.st_ino)
                if key not in self._ino:
                    mid = self._mid()
                    self._ino[key] = mid
                    self.base_files[mid] = Path(p).read_bytes()
                entries[f] = ("f", self._ino[key])
            self.base_dirs[rel] = entries

    # -- resolving names -----------------------------------------------------------

    def _rel(self, path: str | os.PathLike[str]) -> str | None:
        p = os.path.realpath(os.path.dirname(os.fspath(path)))
        full = os.path.join(p, os.path.basename(os.fspath(path)))
        if full == str(self.root):
            return ""
        if not full.startswith(str(self.root) + os.sep):
            return None
        return os.path.relpath(full, self.root)

    @staticmethod
    def _resolve(path: str | os.PathLike[str], dir_fd: int | None) -> str:
        p = os.fspath(path)
        if os.path.isabs(p):
            return p
        base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
        return os.path.join(base, p)

    def _file_mid(self, fd: int) -> int | None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return None
        mid = self._ino.get((st.st_dev, st.st_ino))
        if mid is None:
            rel = self._rel(os.readlink(f"/proc/self/fd/{fd}"))
            if rel is None:
                return None
            mid = self._ino[(st.st_dev, st.st_ino)] = self._mid()
            self.base_files[mid] = b""
        return mid

    def _dir_rel(self, fd: int) -> str | None:
        return self._rel(os.readlink(f"/proc/self/fd/{fd}"))

    def _add(self, name: str, op: Op) -> bool:
        """Record ``op``; False when a planted mistake drops the call (it is then not made)."""
        if self.drop is not None and self.drop(name, op):
            return False
        self.ops.append(op)
        return True

    # -- the wrappers ----------------------------------------------------------------

    def install(self) -> None:
        real = {n: getattr(fsops, n) for n in fsops.__all__}
        self._saved = real

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            full = self._resolve(path, dir_fd)
            existed = os.path.lexists(full)
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            rel = self._rel(full)
            if rel is None:
                return fd
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                if not existed and flags & os.O_CREAT:
                    mid = self._ino[(st.st_dev, st.st_ino)] = self._mid()
                    self._add("create", ("create", _parent(rel), _name(rel), mid))
                elif flags & os.O_TRUNC:
                    mid0 = self._file_mid(fd)
                    if mid0 is not None:
                        self._add("trunc", ("trunc", mid0, 0))
            return fd

        def write(fd: int, data: Any) -> int:
            mid = self._file_mid(fd)
            n = real["write"](fd, data)
            if mid is not None:
                end = os.lseek(fd, 0, os.SEEK_CUR)
                self.ops.append(("write", mid, end - n, bytes(data[:n])))
            return int(n)

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            mid = self._file_mid(fd)
            n = real["pwrite"](fd, data, offset)
            if mid is not None:
                self.ops.append(("write", mid, offset, bytes(data[:n])))
            return int(n)

        def syncer(name: str) -> Callable[[int], None]:
            def sync(fd: int) -> None:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    rel = self._dir_rel(fd)
                    if rel is not None and not self._add("dsync", ("dsync", rel)):
                        return
                else:
                    mid = self._file_mid(fd)
                    if mid is not None and not self._add(name, ("sync", mid)):
                        return
                real[name](fd)

            return sync

        def ftruncate(fd: int, length: int) -> None:
            mid = self._file_mid(fd)
            real["ftruncate"](fd, length)
            if mid is not None:
                self.ops.append(("trunc", mid, length))

        def link(
            src: Any,
            dst: Any,
            *,
            src_dir_fd: int | None = None,
            dst_dir_fd: int | None = None,
            follow_symlinks: bool = False,
        ) -> None:
            st = os.lstat(src, dir_fd=src_dir_fd)
            real["link"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
            rel = self._rel(self._resolve(dst, dst_dir_fd))
            mid = self._ino.get((st.st_dev, st.st_ino))
            if rel is not None and mid is not None:
                self.ops.append(("link", _parent(rel), _name(rel), mid))

        def renamer(name: str) -> Callable[..., None]:
            def rename(src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
                st = os.lstat(src, dir_fd=src_dir_fd)
                if name == "replace":
                    real[name](src, dst, dst_dir_fd=dst_dir_fd)
                else:
                    real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                s_rel = self._rel(self._resolve(src, src_dir_fd))
                d_rel = self._rel(self._resolve(dst, dst_dir_fd))
                mid = self._ino.get((st.st_dev, st.st_ino))
                if s_rel is not None and d_rel is not None and mid is not None:
                    self.ops.append(("rename", _parent(s_rel), _name(s_rel), _parent(d_rel), _name(d_rel), mid))

            return rename

        def unlink(path: Any, *, dir_fd: int | None = None) -> None:
            full = self._resolve(path, dir_fd)
            real["unlink"](path, dir_fd=dir_fd)
            rel = self._rel(full)
            if rel is not None:
                self.ops.append(("unlink", _parent(rel), _name(rel)))

        def mkdir(path: Any, mode: int = 0o777) -> None:
            real["mkdir"](path, mode)
            rel = self._rel(self._resolve(path, None))
            if rel is not None:
                self.ops.append(("mkdir", _parent(rel), _name(rel)))

        wrapped = {
            "open": open_,
            "write": write,
            "pwrite": pwrite,
            "fsync": syncer("fsync"),
            "fdatasync": syncer("fdatasync"),
            "ftruncate": ftruncate,
            "link": link,
            "rename": renamer("rename"),
            "replace": renamer("replace"),
            "unlink": unlink,
            "mkdir": mkdir,
        }
        for n, f in wrapped.items():
            setattr(fsops, n, f)

    def uninstall(self) -> None:
        for n, f in self._saved.items():
            setattr(fsops, n, f)
        self._saved = {}


def _parent(rel: str) -> str:
    return os.path.dirname(rel)


def _name(rel: str) -> str:
    return os.path.basename(rel)


def _join(a: str, b: str) -> str:
    return os.path.join(a, b) if a else b


# -- crash states -------------------------------------------------------------------------


@dataclass
class Point:
    """The model after ``k`` operations: file contents now and at their last sync, pending names."""

    k: int
    current: dict[int, bytes]
    synced: dict[int, bytes]
    ns: list[tuple[int, Op]]  # every directory operation, in order, with its index
    pending: list[int]  # indexes (into ns) of those not yet durable


def point(rec: Recorder, k: int) -> Point:
    cur = {m: bytearray(b) for m, b in rec.base_files.items()}
    syn = dict(rec.base_files)
    ns: list[tuple[int, Op]] = []
    dsync: dict[str, int] = {}
    for i, op in enumerate(rec.ops[:k]):
        kind = op[0]
        if kind == "write":
            _, mid, off, data = op
            buf = cur.setdefault(mid, bytearray())
            if len(buf) < off:
                buf.extend(b"\0" * (off - len(buf)))
            buf[off : off + len(data)] = data
        elif kind == "trunc":
            _, mid, n = op
            buf = cur.setdefault(mid, bytearray())
            del buf[n:]
            buf.extend(b"\0" * (n - len(buf)))
        elif kind == "sync":
            syn[op[1]] = bytes(cur.setdefault(op[1], bytearray()))
        elif kind == "dsync":
            dsync[op[1]] = i
        else:
            if kind == "create":
                cur.setdefault(op[3], bytearray())
                syn.setdefault(op[3], b"")
            ns.append((i, op))
    pending = [j for j, (i, op) in enumerate(ns) if not all(dsync.get(d, -1) > i for d in _dirs_of(op))]
    return Point(k, {m: bytes(b) for m, b in cur.items()}, syn, ns, pending)


def _dirs_of(op: Op) -> tuple[str, ...]:
    if op[0] == "rename":
        return (op[1], op[3])
    return (op[1],)


def namespace(rec: Recorder, p: Point, undone: frozenset[int]) -> dict[str, dict[str, tuple[str, Any]]]:
    dirs = {d: dict(e) for d, e in rec.base_dirs.items()}
    for j, (_, op) in enumerate(p.ns):
        if j in undone:
            continue
        kind = op[0]
        if kind in ("create", "link"):
            dirs.setdefault(op[1], {})[op[2]] = ("f", op[3])
        elif kind == "mkdir":
            dirs.setdefault(op[1], {})[op[2]] = ("d", _join(op[1], op[2]))
            dirs.setdefault(_join(op[1], op[2]), {})
        elif kind == "unlink":
            dirs.get(op[1], {}).pop(op[2], None)
        elif kind == "rename":
            src = dirs.get(op[1], {})
            if src.get(op[2]) == ("f", op[5]):
                del src[op[2]]
            dirs.setdefault(op[3], {})[op[4]] = ("f", op[5])
    return dirs


def variants(synced: bytes, current: bytes, rng: random.Random) -> list[tuple[str, bytes]]:
    """What a file may hold after the cut (see the module doc), each with a short label."""
    if synced == current:
        return [("kept", current)]
    out = [("lost", synced), ("kept", current)]
    if current.startswith(synced):
        start = len(synced)
        cuts: set[int] = set()
        prev = start
        for i in range(start, len(current)):
            if current[i : i + 1] == b"\n":
                cuts.add(i + 1)
                cuts.add((prev + i + 1) // 2)
                prev = i + 1
        if prev < len(current):
            cuts.add((prev + len(current)) // 2)
        cuts.update(range((start // PAGE + 1) * PAGE, len(current), PAGE))
        out += [(f"cut@{c}", current[:c]) for c in sorted(cuts) if start < c < len(current)]
        g = max(start, (len(current) - 1) // PAGE * PAGE)
        out.append((f"zeros@{g}", current[:g] + b"\0" * (len(current) - g)))
        out.append((f"garbage@{g}", current[:g] + rng.randbytes(len(current) - g)))
    else:
        out.append(("zeroed", bytes(len(current))))
    return out


@dataclass
class State:
    point: int
    undone: frozenset[int]
    files: dict[str, bytes]  # every file's path -> bytes (hard links: the same bytes twice)
    links: list[tuple[str, str]]  # (path, first path of the same inode)
    dirs: list[str]
    label: str


def _reachable(dirs: dict[str, dict[str, tuple[str, Any]]]) -> Iterator[tuple[str, str, Any]]:
    todo = [""]
    while todo:
        d = todo.pop()
        for name, (kind, what) in sorted(dirs.get(d, {}).items()):
            path = _join(d, name)
            yield kind, path, what
            if kind == "d":
                todo.append(what)


def states(
    rec: Recorder, k: int, rng: random.Random, *, cap: int = CAP, sample: int = SAMPLE, sampled: list[int] | None = None
) -> Iterator[State]:
    """The crash states of point ``k``: all, or a sample where more than ``cap`` (``k`` then joins ``sampled``)."""
    p = point(rec, k)
    subsets = [frozenset(c) for r in range(len(p.pending) + 1) for c in itertools.combinations(p.pending, r)]
    if len(subsets) > cap:
        if sampled is not None:
            sampled.append(k)
        subsets = [frozenset(), frozenset(p.pending)] + [
            frozenset(j for j in p.pending if rng.random() < 0.5) for _ in range(sample)
        ]
    for undone in subsets:
        dirs = namespace(rec, p, undone)
        entries = list(_reachable(dirs))
        mids = sorted({what for kind, _, what in entries if kind == "f"})
        choice = {m: variants(p.synced.get(m, b""), p.current.get(m, b""), rng) for m in mids}
        combos_n = 1
        for m in mids:
            combos_n *= len(choice[m])
        if combos_n <= cap:
            combos: Iterator[tuple[tuple[str, bytes], ...]] = itertools.product(*(choice[m] for m in mids))
        else:
            if sampled is not None and (not sampled or sampled[-1] != k):
                sampled.append(k)
            picks = [tuple(v[-1 if i == 0 else 0] for v in (choice[m] for m in mids)) for i in range(2)]
            picks += [tuple(rng.choice(choice[m]) for m in mids) for _ in range(sample)]
            combos = iter(picks)
        for combo in combos:
            content = dict(zip(mids, combo, strict=True))
            files: dict[str, bytes] = {}
            links: list[tuple[str, str]] = []
            first: dict[int, str] = {}
            dlist: list[str] = []
            for kind, path, what in entries:
                if kind == "d":
                    dlist.append(path)
                elif what in first:
                    links.append((path, first[what]))
                else:
                    first[what] = path
                    files[path] = content[what][1]
            label = ",".join(f"{m}:{content[m][0]}" for m in mids if content[m][0] != "kept")
            yield State(k, undone, files, links, dlist, f"undone={sorted(undone)} files=[{label}]")


_DEAD_PID: list[int] = []


def dead_pid() -> int:
    """A pid no process has now (one that ran and exited)."""
    if not _DEAD_PID:
        import subprocess

        p = subprocess.Popen(["true"])
        p.wait()
        _DEAD_PID.append(p.pid)
    return _DEAD_PID[0]


def _rebooted(path: str) -> str:
    """After the cut the machine restarts: the process that wrote is dead, so are the pids its staging names carry."""
    me = f".{os.getpid()}."
    return path.replace(me, f".{dead_pid()}.") if me in os.path.basename(path) else path


def materialize(s: State, where: Path) -> None:
    where.mkdir(parents=True)
    for d in sorted(s.dirs, key=len):
        (where / d).mkdir(exist_ok=True)
    for path, data in s.files.items():
        (where / _rebooted(path)).write_bytes(data)
    for path, target in s.links:
        os.link(where / _rebooted(target), where / _rebooted(path))


@dataclass
class Report:
    path: str
    points: int = 0
    states: int = 0
    sampled: list[int] = field(default_factory=list)  # points whose states were sampled (more than the cap)
    violations: list[str] = field(default_factory=list)


def explore(
    rec: Recorder,
    check: Callable[[Path, list[Mark]], list[str]],
    *,
    name: str,
    points: Iterator[int] | None = None,
    seed: int = SEED,
    cap: int = CAP,
    sample: int = SAMPLE,
    stop_after: int = 5,
) -> Report:
    """Every crash point of ``rec`` (or ``points``), every (or a sample of its) crash states, ``check``ed.

    ``check(folder, marks)`` gets a fresh copy of the state (the ledger at ``folder``) and the
    marks made before the cut; it returns the broken invariants. The report names, for
    each, the seed, the point and the state, so it can be rebuilt.
    """
    rng = random.Random(seed)
    report = Report(name)
    seen: set[tuple[Any, ...]] = set()
    scratch = Path(tempfile.mkdtemp(prefix="crashsim-"))
    try:
        for k in points if points is not None else range(len(rec.ops) + 1):
            report.points += 1
            marks = [m for m in rec.marks if m.at <= k]
            for s in states(rec, k, rng, cap=cap, sample=sample, sampled=report.sampled):
                key = (len(marks), tuple(sorted(s.files.items())), tuple(s.links), tuple(sorted(s.dirs)))
                if key in seen:
                    continue
                seen.add(key)
                report.states += 1
                where = scratch / str(report.states)
                materialize(s, where)
                try:
                    broken = check(where, marks)
                except Exception as exc:  # a recovery that raises is a broken invariant too
                    broken = [f"recovery raised {type(exc).__name__}: {exc}"]
                for b in broken:
                    report.violations.append(
                        f"{name}: seed={seed} point={k}/{len(rec.ops)} (after {rec.ops[k - 1][0] if k else 'nothing'}) "
                        f"{s.label}: {b}"
                    )
                shutil.rmtree(where, ignore_errors=True)
                if len(report.violations) >= stop_after:
                    return report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report
