"""Reading the ledger for a plan: each stream's age, size, state and the digests it names or holds."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import re
import stat
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from .. import viewcache
from .._internal.digest import DIGEST_PREFIX
from ..errors import IntentlogError, LedgerError
from ..eventlog.format import Event, check_task_id
from ..eventlog.reader import StreamScan
from ..projections.idioms import CHILD_SPAWNED, INBOX_SUFFIX, JOINED, SPAWNED, IdiomFold
from ..projections.operator import OperatorFold
from ..projections.status import OPERATOR_STATES, open_children, status_of
from ..projections.workstate import WorkStateFold
from ..refs import DIGEST_BYTES_RE, KEEP, walk
from ..viewcache import paused_gc
from ..viewcache.index import IndexJoin, facts_of
from .backlogs import BacklogNeeds, backlog_needs
from .policy import GcPolicy, format_duration, parse_ts
from .rows import TaskRows
from .rules import KeepMark, protected_by


class Layout(Protocol):
    """Where a ledger folder keeps what a scan reads: its root (the view cache's index) and ``tasks/``."""

    @property
    def root(self) -> Path: ...

    @property
    def tasks_dir(self) -> Path: ...


TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1 << 20
NEVER: Final = -1  # a digest held or referenced by a task that is never deleted
_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_US: Final = _dt.timedelta(microseconds=1)


def micros(when: _dt.datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact: datetimes count microseconds)."""
    return (when - _EPOCH) // _US


# -- scanning --------------------------------------------------------------------------


def collect_digests(data: Any, refs: set[bytes], held: set[bytes]) -> None:
    """Every digest named anywhere in ``data`` (refs and bare strings, keys too) into ``refs``;
    the digests of payloads riding inline into ``held`` (the :data:`~intentlog.refs.KEEP` walk)."""
    for digest, ref in walk(data, KEEP):
        key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
        refs.add(key)
        if ref is not None:
            held.add(key)


def digests_in_file_tail(path: Path, offset: int, out: set[bytes]) -> None:
    """Digests named in the raw bytes from ``offset`` on (an incomplete last line), chunk by chunk."""
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        carry = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf = carry + chunk
            for m in DIGEST_BYTES_RE.finditer(buf):
                out.add(bytes.fromhex(m.group(1).decode()))
            carry = buf[-(len(DIGEST_PREFIX) + 63) :]


def _lock_held(lock_path: str) -> bool:
    """True when a writer holds the task's ``flock``; creates and writes nothing.

    The probe takes the lock for an instant: a writer opening the task at that very
    moment with ``wait=0`` would see :class:`TaskBusy`. Only tasks otherwise eligible
    for deletion (idle past the grace period) are probed.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell (a link, no permission): treat it as held
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # held (EWOULDBLOCK), or flock unsupported here: treat it as held
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def file_ident(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(slots=True)
class TaskInfo:
    task: str
    size: int = 0
    ident: tuple[int, int, int] = (0, 0, 0)
    head: str | None = None
    stream: str | None = None
    events: int = 0
    last_ts: str | None = None
    last_dt: _dt.datetime | None = None
    rule: str | None = None  # why it is never deleted; None: eligible
    detail: str = ""
    state: str | None = None  # the operator state (None: the stream could not be read)
    parent: str | None = None  # the task that spawned this one (its ``task.spawned``)
    unjoined: tuple[str, ...] = ()  # the children it spawned and has not joined, in spawn order
    kids: frozenset[str] = frozenset()  # the same, to look up
    after: str | None = None  # deleted only once this task is (its task, for an inbox; its parent, for a child)


@dataclass(slots=True)
class Scan:
    """What one pass over the tasks learned.

    Memory: 24 bytes a task (``rows``' offsets, ``sizes``, ``last_us``; the records
    themselves are in ``rows``' scratch file), 4 bytes an eligible task (``eligible``), and
    per distinct digest (``refs``, ``held``; bounded by ``max_tracked``).
    """

    rows: TaskRows = field(default_factory=TaskRows)  # every task's record, index -> record
    sizes: array[int] = field(default_factory=lambda: array("q"))  # index -> stream bytes
    last_us: array[int] = field(default_factory=lambda: array("q"))  # index -> last activity (eligible only)
    eligible: array[int] = field(default_factory=lambda: array("i"))  # indices of deletable tasks, id order
    # digest -> index of the eligible task that refers to it with the latest sort key, or NEVER
    refs: dict[bytes, int] = field(default_factory=dict)
    # digest -> the same, over tasks that carry its bytes inline
    held: dict[bytes, int] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    # indices whose next index is the same unit (UnitSettler): a size cap takes both or neither
    bound: set[int] = field(default_factory=set)
    stream_names: int = 0
    stream_bytes: int = 0
    tracking: bool = True


def _later(scan: Scan, a: int, b: int) -> bool:
    """Is task ``b`` deleted no earlier than task ``a`` (both eligible indices; index order is id order)?"""
    return (scan.last_us[b], b) >= (scan.last_us[a], a)


def _note_digests(
    scan: Scan, table: dict[bytes, int], digests: set[bytes], index: int, *, eligible: bool, limit: int
) -> None:
    for d in digests:
        cur = table.get(d)
        if cur is None:
            if len(scan.refs) + len(scan.held) >= limit:
                scan.tracking = False
                scan.incomplete.append(
                    f"more than {limit} distinct digests: references are not tracked in full within the memory "
                    "budget (max_tracked)"
                )
                scan.refs.clear()
                scan.held.clear()
                return
            table[d] = index if eligible else NEVER
        elif cur != NEVER and (not eligible or _later(scan, cur, index)):
            table[d] = index if eligible else NEVER


#: ``progress(what, done, total)``: a terminal's progress line.
Progress = Callable[[str, int, int], None]


def scan_tasks(
    ledger: Layout,
    now: _dt.datetime,
    policy: GcPolicy,
    marks: Mapping[str, KeepMark],
    *,
    limit: int,
    progress: Progress | None = None,
    use_index: bool = False,
) -> Scan:
    """Scan every stream for a plan. With ``use_index`` (a preview), a stream whose file facts are
    those the view cache's index recorded is not read; without it (what apply carries out) every
    stream is read, whatever the index says."""
    scan = Scan()
    try:
        names = sorted((e.name for e in os.scandir(ledger.tasks_dir) if e.name.endswith(".jsonl")), key=_task_of)
    except FileNotFoundError:
        names = []
    except OSError as exc:
        raise IntentlogError(f"cannot list {ledger.tasks_dir}: {exc.strerror or exc}; check its permissions") from exc
    scan.stream_names = len(names)
    write = use_index and len(names) >= viewcache.MIN_TASKS
    with paused_gc():
        with IndexJoin(ledger.root, "backlogs", write=write, read=use_index) as join:
            needed = backlog_needs(ledger.tasks_dir, names, join)
        with IndexJoin(ledger.root, "gc", write=write, read=use_index) as join:
            _scan_names(ledger, names, scan, now, policy, marks, needed, join, limit=limit, progress=progress)
    return scan


def _task_of(name: str) -> str:
    """The task id of a stream's file name (listings go in id order, as the index is kept)."""
    return name[: -len(".jsonl")]


def _scan_names(
    ledger: Layout,
    names: list[str],
    scan: Scan,
    now: _dt.datetime,
    policy: GcPolicy,
    marks: Mapping[str, KeepMark],
    needed: BacklogNeeds,
    join: IndexJoin,
    *,
    limit: int,
    progress: Progress | None,
) -> None:
    """Scan each stream in id order, taking from ``join`` (the gc index) each whose file facts it recorded."""
    units = UnitSettler(scan, names, limit=limit, key=_task_of)
    for done, name in enumerate(names, start=1):
        if progress is not None:
            progress("streams", done, len(names))
        tid = name[: -len(".jsonl")]
        try:
            check_task_id(tid)
        except ValueError:
            shown = os.fsencode(name).decode("utf-8", "backslashreplace")  # bytes that are not UTF-8, escaped
            scan.incomplete.append(f"tasks/{shown} is not named like a task stream; move it out of tasks/")
            with contextlib.suppress(OSError):
                scan.stream_bytes += os.stat(ledger.tasks_dir / name).st_size
            continue
        info = TaskInfo(tid)
        refs: set[bytes] = set()
        held: set[bytes] = set()
        readable = _from_index(ledger, info, refs, held, join) or _scan_one(ledger, info, refs, held, scan, join)
        scan.stream_bytes += info.size
        if readable:
            _classify(ledger, info, now, policy, marks, needed)
        units.add(info, refs, held, readable=readable)
    units.finish()
    join.commit()


def _relation(member: TaskInfo, keeper: TaskInfo) -> str:
    """How ``keeper`` binds ``member``, as a plan's detail says it ("kept with its inbox 'x.inbox'...")."""
    k = repr(keeper.task)
    if keeper.task == member.task + INBOX_SUFFIX:
        return f"its inbox {k}"
    if member.task == keeper.task + INBOX_SUFFIX:
        return f"its task {k}"
    if keeper.task in member.kids:
        return f"its child {k}, not yet joined"
    if member.task in keeper.kids:
        return f"its parent {k}, which has not joined it"
    if member.parent == keeper.task:
        return f"its parent {k}, whose record cannot say whether it joined it"
    return f"{k} (a parent and the children it has not joined, with their inboxes, are kept together)"


def _rule(member: TaskInfo, keeper: TaskInfo) -> str:
    """The rule a plan names for ``member`` kept with ``keeper``: ``unit`` (a task and its inbox), else ``children``."""
    inbox = keeper.task == member.task + INBOX_SUFFIX or member.task == keeper.task + INBOX_SUFFIX
    return "unit" if inbox else "children"


def join_unit(members: Sequence[TaskInfo]) -> None:
    """Make tasks bound together one unit: what keeps one keeps all; all go by the latest activity.

    The bonds (:class:`UnitSettler` finds them): a task and its inbox (a task kept for the
    other's reason: rule ``unit``), and a parent and each child it spawned and has not
    joined (rule ``children``). A waiting task keeps its inbox (a signal not yet
    received is never deleted) and a parent its children (its join reads their results); a
    kept or busy inbox or child keeps its task or parent. An idle unit is ordered by its
    latest activity, so that an age limit or a size cap takes all or none of it (the plan
    never cuts through a unit). ``members`` in id order; a keeper directly bound to a member
    is named in its detail, else the first.
    """
    keepers = {m.task: m for m in members if m.rule is not None}
    if keepers:
        first = next(iter(keepers.values()))
        parents = _parents(members)
        for m in members:
            if m.rule is None:
                box = m.task[: -len(INBOX_SUFFIX)] if m.task.endswith(INBOX_SUFFIX) else None
                near = [m.task + INBOX_SUFFIX, box, parents.get(m.task), m.parent, *m.unjoined]
                k = next((keepers[n] for n in near if n is not None and n in keepers), first)
                m.rule, m.detail = _rule(m, k), f"kept with {_relation(m, k)}: [{k.rule}] {k.detail}"
        return
    dated = [m.last_dt for m in members if m.last_dt is not None]
    if dated:
        latest = max(dated)
        for m in members:
            if m.last_dt is not None:
                m.last_dt = latest


@dataclass(slots=True)
class _Held:
    info: TaskInfo
    refs: set[bytes]
    held: set[bytes]
    readable: bool


class UnitSettler:
    """Settles scanned tasks (:func:`settle`), a unit's tasks held back until the whole unit is scanned.

    A unit (:func:`join_unit`) is what a task's bonds join: its inbox (``<task>.inbox``), and
    the children its record spawned and has not joined. Every storage scans in id order, so
    a task is held back while a task listed after it may bind it: its inbox, an unjoined
    child, or the parent its own record names (whose record says whether it joined it).
    Once nothing listed later can bind any task of its unit, the unit is settled, its tasks
    one right after the other in id order, so a unit is adjacent in the plan's deletion
    order (its consecutive places are in ``scan.bound``). A child whose own record does not
    name its parent (a crash between the parent's ``task.child_spawned`` and the child's
    ``task.spawned``: it holds nothing but its creation; the parent's re-run writes its
    link) is settled on its own when listed before its parent.

    The held tasks form units by union-find, each unit counting the scans it still waits
    for: a task costs a near-constant time whatever the size of its unit. Memory: the tasks
    held back -- the task of an inbox until its inbox is scanned; a child until its parent
    is; a unit until all of it is -- and the tasks whose stream cannot be read (their ids).
    """

    def __init__(
        self, scan: Scan, names: Sequence[str], *, limit: int, key: Callable[[str], str] | None = None
    ) -> None:
        """``names``: every stream the scan lists, in id order; ``key``: a name's task id (None: the name is)."""
        self._scan, self._names, self._key, self._limit = scan, names, key, limit
        self._held: dict[str, _Held] = {}
        self._waiting: dict[str, list[str]] = {}  # a task listed later -> the held tasks waiting for it
        self._up: dict[str, str] = {}  # union-find over the held tasks: a task -> a task of its unit
        self._members: dict[str, list[str]] = {}  # a unit's root -> its tasks
        self._open: dict[str, int] = {}  # a unit's root -> the scans it still waits for
        self._unread: dict[str, TaskInfo] = {}  # the settled tasks whose stream cannot be read (a child may name one)

    def _later(self, task: str, tid: str) -> bool:
        """Is ``tid`` a task listed after ``task`` (so not scanned yet)?"""
        if tid <= task:
            return False
        i = bisect_left(self._names, tid, key=self._key)
        return i < len(self._names) and (self._key or str)(self._names[i]) == tid

    def _root(self, task: str) -> str:
        root = task
        while self._up[root] != root:
            root = self._up[root]
        while self._up[task] != root:  # path compression
            self._up[task], task = root, self._up[task]
        return root

    def _union(self, a: str, b: str) -> None:
        ra, rb = self._root(a), self._root(b)
        if ra == rb:
            return
        if len(self._members[ra]) < len(self._members[rb]):
            ra, rb = rb, ra
        self._up[rb] = ra
        self._members[ra] += self._members.pop(rb)
        self._open[ra] += self._open.pop(rb)

    def add(self, info: TaskInfo, refs: set[bytes], held: set[bytes], *, readable: bool) -> None:
        t = info.task
        entry = _Held(info, refs, held, readable)
        waiters = self._waiting.pop(t, [])
        for w in waiters:
            self._open[self._root(w)] -= 1
        parent = [info.parent] if info.parent is not None else []
        unread = self._unread.get(info.parent) if info.parent is not None else None
        if unread is not None and info.rule is None:  # its parent, settled before it, cannot be read
            info.rule = "children"
            info.detail = f"kept with {_relation(info, unread)}: [{unread.rule}] {unread.detail}"
        near = [*waiters, *info.unjoined, *parent] + ([t[: -len(INBOX_SUFFIX)]] if t.endswith(INBOX_SUFFIX) else [])
        bonds = [o for o in dict.fromkeys(near) if o in self._held and _bonded(self._held[o].info, info)]
        waits = [tid for tid in dict.fromkeys([t + INBOX_SUFFIX, *info.unjoined, *parent]) if self._later(t, tid)]
        if waits or bonds:
            self._held[t] = entry
            self._up[t], self._members[t], self._open[t] = t, [t], len(waits)
            for tid in waits:
                self._waiting.setdefault(tid, []).append(t)
            for o in bonds:
                self._union(t, o)
        else:
            self._settle([entry])
        for root in dict.fromkeys(self._root(x) for x in [t, *waiters] if x in self._held):
            if self._open[root] == 0:
                self._release(root)

    def _release(self, root: str) -> None:
        """Settle the unit of ``root``: nothing listed later can bind any of it."""
        tasks = sorted(self._members.pop(root))
        del self._open[root]
        for task in tasks:
            del self._up[task]
        self._settle([self._held.pop(task) for task in tasks])

    def finish(self) -> None:
        """Settle what is still held back (waiting for a task that could not be listed or named)."""
        self._waiting.clear()
        for root in sorted(self._members, key=lambda r: min(self._members[r])):
            self._release(root)

    def _settle(self, unit: list[_Held]) -> None:
        if len(unit) > 1:
            join_unit([e.info for e in unit])
            tasks = {e.info.task: e.info for e in unit}
            parents = _parents(tasks.values())
            for e in unit:
                e.info.after = _after(e.info, tasks, parents)
        for n, e in enumerate(unit):
            if e.info.state is None:
                self._unread[e.info.task] = e.info
            if n:
                self._scan.bound.add(len(self._scan.rows) - 1)  # this place and the one before: one unit
            settle(self._scan, e.info, e.refs, e.held, readable=e.readable, index=len(self._scan.rows),
                   limit=self._limit)  # fmt: skip


def _bonded(a: TaskInfo, b: TaskInfo) -> bool:
    """Are ``a`` and ``b`` a task and its inbox, or a parent and a child it has not joined (either way)?

    A parent whose stream cannot be read (``state`` None) may not have joined the child
    naming it: bonded, never guessed in the direction of deleting.
    """
    return (
        b.task == a.task + INBOX_SUFFIX
        or a.task == b.task + INBOX_SUFFIX
        or b.task in a.kids
        or a.task in b.kids
        or (b.parent == a.task and a.state is None)
        or (a.parent == b.task and b.state is None)
    )


def _parents(members: Iterable[TaskInfo]) -> dict[str, str]:
    """Child -> the member of the unit that spawned it and has not joined it (the first such, in id order)."""
    out: dict[str, str] = {}
    for m in members:
        for c in m.unjoined:
            out.setdefault(c, m.task)
    return out


def _after(info: TaskInfo, unit: Mapping[str, TaskInfo], parents: Mapping[str, str]) -> str | None:
    """The task of ``unit`` whose deletion ``info``'s must follow: an inbox's task, an unjoined child's parent."""
    if info.task.endswith(INBOX_SUFFIX) and info.task[: -len(INBOX_SUFFIX)] in unit:
        return info.task[: -len(INBOX_SUFFIX)]
    parent = parents.get(info.task)
    return parent if parent is not None and parent != info.task else None


def settle(
    scan: Scan, info: TaskInfo, refs: set[bytes], held: set[bytes], *, readable: bool, index: int, limit: int
) -> None:
    """Record a scanned task and, when it could be read, the digests it names and holds."""
    _record(scan, info)
    if not readable:
        return  # refs unknown: recorded as incomplete
    eligible = info.rule is None
    if scan.tracking:
        _note_digests(scan, scan.refs, refs, index, eligible=eligible, limit=limit)
    if scan.tracking:
        _note_digests(scan, scan.held, held, index, eligible=eligible, limit=limit)


def _record(scan: Scan, info: TaskInfo) -> None:
    """Append the task's record to ``scan.rows`` and its ordering facts to the columns."""
    eligible = info.rule is None and info.last_dt is not None
    scan.rows.append(
        [
            info.task, None if eligible else info.rule, info.detail, info.size, info.last_ts, info.state,
            info.head, info.events, info.stream, list(info.ident), info.after,
        ]
    )  # fmt: skip
    scan.sizes.append(info.size)
    scan.last_us.append(micros(info.last_dt) if eligible and info.last_dt is not None else 0)
    if eligible:
        scan.eligible.append(len(scan.rows) - 1)


def _from_index(
    ledger: Layout,
    info: TaskInfo,
    refs: set[bytes],
    held: set[bytes],
    join: IndexJoin,
) -> bool:
    """Fill ``info`` from the index when the stream's file facts are those it recorded; False to read it."""
    cached = join.find(info.task)
    if cached is None:
        return False
    try:
        # a str path: a Path would intern the name, growing the interpreter's table by a slot a task
        st = os.lstat(os.path.join(ledger.tasks_dir, f"{info.task}.jsonl"))
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or facts_of(st) != cached[0]:
        return False
    v = _gc_entry(cached[1])
    if v is None:
        return False
    try:
        refs.update(bytes.fromhex(d) for d in v[6])
        held.update(bytes.fromhex(d) for d in v[7])
    except (TypeError, ValueError):
        refs.clear()
        held.clear()
        return False
    info.head, info.stream, info.events, info.last_ts, state, protected = v[:6]
    info.parent, info.unjoined = v[8], tuple(v[9])
    info.kids = frozenset(info.unjoined)
    info.state = sys.intern(state)  # a few words, shared by every task
    info.size, info.ident = st.st_size, file_ident(st)
    if protected is not None:
        info.rule, info.detail = "protected", str(protected)
    join.keep()
    return True


def _gc_entry(v: Any) -> list[Any] | None:
    """The gc index's value for a stream (as :func:`_scan_one` puts it), every field's type checked; None otherwise.

    ``[head, stream, events, last_ts, state, protected, refs, held, parent, unjoined]``:
    text or None, a non-negative count, a timestamp as the scan keeps them (or None), an
    operator state, the protection's reason (or None), two lists of text, the task's parent
    (or None) and the children it has not joined (a list of text). An entry that is not
    exactly this is never used: the stream is read.
    """
    if type(v) is not list or len(v) != 10:
        return None
    head, stream, events, last_ts, state, protected, refs, held, parent, unjoined = v
    if type(events) is not int or events < 0 or type(refs) is not list or type(held) is not list:
        return None
    if not all(x is None or type(x) is str for x in (head, stream, protected, parent)):
        return None
    if type(unjoined) is not list or not all(type(c) is str for c in unjoined):
        return None
    if last_ts is not None and (type(last_ts) is not str or TS_RE.match(last_ts) is None):
        return None
    if type(state) is not str or state not in OPERATOR_STATES:
        return None
    return v


_CHILD_LINKS: Final = frozenset({CHILD_SPAWNED, SPAWNED, JOINED})


def fold_for_gc(
    info: TaskInfo, events: Iterable[Event], refs: set[bytes], held: set[bytes]
) -> tuple[WorkStateFold, OperatorFold, str | None, Event | None]:
    """One pass over a task's events as gc reads them, whatever holds the stream.

    Its work state and operator folds, its latest well-formed timestamp and its last event;
    the stream id of its creation record, its parent and the children it has not joined
    are set on ``info``, and the digests it names are added to ``refs`` (and those of
    inline payloads to ``held``).
    """
    fold = WorkStateFold(info.task)
    ops = OperatorFold()
    family = IdiomFold()  # fed only the child links: what the children projection says of them
    latest: str | None = None
    last: Event | None = None
    for ev in events:
        fold.apply(ev)
        ops.apply(ev)
        if ev.seq == 0 and isinstance(ev.data.get("stream"), str):
            info.stream = ev.data["stream"]
        if TS_RE.match(ev.ts) and (latest is None or ev.ts > latest):
            latest = ev.ts
        if ev.kind in _CHILD_LINKS:
            family.apply(ev)
        collect_digests(ev.data, refs, held)
        last = ev
    links = family.result()
    info.parent, info.unjoined = links.parent, open_children(links)
    info.kids = frozenset(info.unjoined)
    return fold, ops, latest, last


def _scan_one(ledger: Layout, info: TaskInfo, refs: set[bytes], held: set[bytes], scan: Scan, join: IndexJoin) -> bool:
    """Read one stream: size, identity, head, latest timestamp, protection, digests. False if unreadable."""
    path = ledger.tasks_dir / f"{info.task}.jsonl"
    where = f"tasks/{info.task}.jsonl"
    try:
        before = os.stat(path)
        info.size = before.st_size
        s = StreamScan(path)
        fold, ops, latest, _ = fold_for_gc(info, s, refs, held)
        p = s.problem
        if p is not None and p.incomplete:
            digests_in_file_tail(path, p.offset, refs)  # an append that never returned: keep what it names
        after = os.stat(path)
    except OSError as exc:
        info.rule, info.detail = "unreadable", f"cannot be read: {exc.strerror or exc}"
        scan.incomplete.append(f"{where}: cannot be read ({exc.strerror or exc})")
        return False
    except LedgerError as exc:  # a link or a special file at the stream's name: never read, kept
        info.rule, info.detail = "unreadable", f"cannot be read: {exc}"
        scan.incomplete.append(f"{where}: cannot be read ({exc})")
        return False
    if p is not None and not p.incomplete:
        info.rule, info.detail = "unreadable", f"line {p.line}: {p.reason}; run 'intentlog verify'"
        scan.incomplete.append(f"{where} line {p.line}: {p.reason}")
        return False
    info.ident = file_ident(after)
    info.size = after.st_size
    info.head = s.head
    info.events = s.count
    info.last_ts = latest
    ws = fold.result()
    st = status_of(info.task, ws, ops.result(ws))
    info.state = sys.intern(st.state)
    if file_ident(before) != file_ident(after):
        info.rule, info.detail = "busy", "it changed while it was read (a writer is appending)"
        return True
    protected = protected_by(st, info.unjoined)
    if protected is not None:
        info.rule, info.detail = "protected", protected
    if p is None and stat.S_ISREG(after.st_mode):
        gc_facts = [info.head, info.stream, info.events, info.last_ts, info.state, protected]
        digests = [sorted(r.hex() for r in refs), sorted(h.hex() for h in held)]
        join.put(info.task, facts_of(after), [*gc_facts, *digests, info.parent, list(info.unjoined)])
    return True


def _classify(
    ledger: Layout,
    info: TaskInfo,
    now: _dt.datetime,
    policy: GcPolicy,
    marks: Mapping[str, KeepMark],
    needed: BacklogNeeds,
) -> None:
    """:func:`classify` with the folder's probe of the task's writer lock."""

    def busy(task: str) -> str | None:
        if _lock_held(os.path.join(ledger.tasks_dir, f"{task}.jsonl.lock")):
            return "open for writing: a process holds its writer lock"
        return None

    classify(info, now, policy, marks, needed, busy)


#: ``busy(task)``: why the task is open for writing right now (its writer lock, its lease), or None.
Busy = Callable[[str], str | None]


def classify(
    info: TaskInfo,
    now: _dt.datetime,
    policy: GcPolicy,
    marks: Mapping[str, KeepMark],
    needed: BacklogNeeds,
    busy: Busy,
) -> None:
    """Decide whether a readable task may be deleted at all (``info.rule`` None) or why not.

    ``busy`` is asked only of a task otherwise eligible (idle past the grace period)."""
    if info.rule is not None:
        return
    mark = marks.get(info.task)
    if mark is not None:
        info.rule = "keep"
        info.detail = f"marked by 'intentlog keep' at {mark.since}" + (f": {mark.note}" if mark.note else "")
        return
    claim = needed.claim(info.task, child=info.parent is not None)
    if claim is not None:
        info.rule, info.detail = "backlog", claim
        return
    if info.last_ts is None:
        info.rule, info.detail = "undated", "no event carries a timestamp to date it by"
        return
    try:
        info.last_dt = parse_ts(info.last_ts)
    except ValueError:
        info.rule, info.detail = "undated", f"its latest timestamp {info.last_ts!r} is not a real date"
        return
    idle = (now - info.last_dt).total_seconds()
    if idle < policy.grace:
        info.rule = "grace"
        info.detail = f"last activity {info.last_ts}, within the grace period ({format_duration(policy.grace)})"
        return
    held = busy(info.task)
    if held is not None:
        info.rule, info.detail = "busy", held


@dataclass(slots=True)
class Candidate:
    rank: int  # 0: referenced by no task; k: freed once the k oldest eligible tasks are deleted
    digest: str
    size: int
    mtime_ns: int
    in_grace: bool
    touches: int = 0  # on a store: the writers' touches seen (a new one since the plan spares it)
