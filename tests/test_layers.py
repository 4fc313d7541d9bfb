"""Layers point one way (DESIGN §8, STYLE 1 and 4): checked by walking the imports.

``eventlog`` and ``artifacts`` know nothing of calls, projections never write, the public
face is pinned, and importing intentlog stays cheap (no filelock, no click).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import intentlog

PKG = Path(intentlog.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved; ``from a import b`` gives a and a.b)."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def _files(sub: str) -> list[Path]:
    target = PKG / sub
    return sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]


def _violations(subs: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for sub in subs:
        for f in _files(sub):
            for mod in sorted(imports_of(f)):
                if any(mod == x or mod.startswith(x + ".") for x in forbidden):
                    bad.append(f"{f.relative_to(PKG.parent)} imports {mod}")
    return bad


def test_the_import_walker_resolves_relative_imports() -> None:
    """imports_of resolves ``from ..x import y`` against the module's package (so the layer checks can fail)."""
    writer = imports_of(PKG / "eventlog" / "writer.py")
    assert {"intentlog._internal.fsutil", "intentlog.errors", "intentlog.eventlog.format"} <= writer
    assert "intentlog.eventlog.writer" in imports_of(PKG / "eventlog" / "__init__.py")
    assert _violations(("eventlog",), ("intentlog._internal.fsutil",)), "a forbidden import is reported"


def test_eventlog_and_artifacts_know_nothing_above_them() -> None:
    """intentlog/eventlog and intentlog/artifacts import nothing from projections, effects, cli, task or ledger."""
    assert (
        _violations(
            ("eventlog", "artifacts"),
            ("intentlog.projections", "intentlog.effects", "intentlog.cli", "intentlog.task", "intentlog.ledger"),
        )
        == []
    )


def test_projections_import_no_writer() -> None:
    """intentlog/projections imports neither the stream writer nor the atomic-write helper: projections never write."""
    assert (
        _violations(
            ("projections",), ("intentlog.eventlog.writer", "intentlog._internal.fsutil", "intentlog.eventlog.lock")
        )
        == []
    )


def test_public_names_are_pinned() -> None:
    """intentlog.__all__ is exactly this sorted list, and every name in it exists."""
    expected = [
        "CANON_VERSION",
        "NO_RETRY",
        "ApprovalConflict",
        "ApprovalPending",
        "ApprovalRejected",
        "ApprovalState",
        "ApprovalVoid",
        "ArtifactError",
        "ArtifactMissing",
        "ArtifactStore",
        "Backlog",
        "Call",
        "CallFailed",
        "CallState",
        "Checkpoint",
        "ChildrenPending",
        "CompilationState",
        "Conflict",
        "CorruptStream",
        "DigestMismatch",
        "EffectUnknown",
        "Event",
        "EventConflict",
        "EventTimedOut",
        "IntentlogError",
        "InvalidDigest",
        "InvalidTaskId",
        "KeyReused",
        "Ledger",
        "LedgerError",
        "LinkRefused",
        "NotALedger",
        "NotSent",
        "NotSerializable",
        "OutsideWorkspace",
        "Package",
        "PayloadChanged",
        "PreparationFailed",
        "ProviderDedup",
        "ProviderFailure",
        "Redact",
        "Ref",
        "ReinterpretFailed",
        "RepairReport",
        "RequiredContextMissing",
        "ReservedKind",
        "ResumeRefused",
        "RetryHandedBack",
        "RetryPolicy",
        "Revision",
        "Revisions",
        "Served",
        "Session",
        "StillBlocked",
        "StreamPoisoned",
        "Suspended",
        "Task",
        "TaskBusy",
        "Turn",
        "UnknownApproval",
        "UnknownCall",
        "UsageError",
        "WorkState",
        "WrongType",
        "__version__",
        "canonicalize",
        "heartbeat",
        "open",
        "request_hash",
        "work_state",
    ]
    assert list(intentlog.__all__) == expected
    assert expected == sorted(expected, key=lambda n: (not n.isupper(), n[0].islower() or n.startswith("_"), n))
    for name in expected:
        assert hasattr(intentlog, name), name


@pytest.mark.parametrize("heavy", ["filelock", "click"])
def test_importing_intentlog_loads_no_filelock_or_click(heavy: str) -> None:
    """``import intentlog`` in a fresh interpreter leaves filelock and click unimported (they load on first use)."""
    code = "import sys, json, intentlog; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    modules = json.loads(out)
    assert "intentlog" in modules
    assert not [m for m in modules if m == heavy or m.startswith(heavy + ".")]


# -- the rank table: every import points down ---------------------------------------------------------
#
# Each module has a rank; a module may import only modules of its own rank or lower, whether
# the import runs at module level, inside a function (deferred) or only for type checking
# (``if TYPE_CHECKING:``): a deferred or type-only import that points up is still a cycle a
# reader has to untangle. The most specific pattern names a module's rank ("x.*" is x and
# everything under it). A module the table does not rank fails the test: rank it when adding it.

RANKS: dict[str, tuple[float, str]] = {
    # 0 foundation: errors and the file-system and digest helpers everything shares
    "intentlog.errors": (0, "foundation"),
    "intentlog._internal": (0, "foundation"),
    "intentlog._internal.*": (0, "foundation"),
    "intentlog._internal.digest": (0, "foundation"),
    "intentlog._internal.args": (0, "foundation"),
    "intentlog._internal.text": (0, "foundation"),
    "intentlog._internal.types": (0, "foundation"),
    "intentlog._internal.nofollow": (0, "foundation"),
    "intentlog._internal.fsops": (0, "foundation"),
    "intentlog._internal.fsutil": (0, "foundation"),
    "intentlog._internal.regular": (0, "foundation"),
    "intentlog._internal.procs": (0, "foundation"),
    # 1 storage: streams and objects behind their seams; they know nothing of calls
    "intentlog.eventlog.*": (1, "storage"),
    "intentlog.artifacts.*": (1, "storage"),
    # the codecs of the ledger's own files, next to their writers (heads.json, gc.jsonl)
    "intentlog.heads.codec": (1, "storage"),
    "intentlog.eventlog.gclog": (1, "storage"),
    # the seams' object-store implementations (the s3 extra), and a local SeaweedFS to run them on
    "intentlog.s3": (1, "storage"),
    "intentlog.s3.*": (1, "storage"),
    # 2 pure: folds over events and policies that read and write nothing
    "intentlog._internal.diff": (2, "pure"),
    "intentlog.dedup": (2, "pure"),
    "intentlog.projections.*": (2, "pure"),
    # 3 features, ordered inside (3.0 < 3.1 < 3.2 < 3.3): the stream core and the names every
    # feature shares; then the effect protocol, the view cache and the checker written on them;
    # then what is built from those (checkpoints, compilation, turns, the report); last the
    # features that compose them (sessions, http, bundles, retention)
    "intentlog.refs": (3.0, "core"),
    # the stream core the features are written against (writer lifecycle, live fold, batch)
    "intentlog.stream": (3.0, "core"),
    "intentlog.heads": (3.0, "core"),
    # repair on an object-store ledger
    "intentlog.storerepair": (3.0, "core"),
    "intentlog.verify_bundle": (3.0, "core"),
    "intentlog.effects": (3.1, "effects"),
    "intentlog.effects.*": (3.1, "effects"),
    "intentlog.approvals": (3.1, "effects"),
    "intentlog.fork": (3.1, "effects"),
    # the idioms of durable execution (values, sleep, events, children), written on the stream core
    "intentlog.idioms": (3.1, "effects"),
    "intentlog.idioms.*": (3.1, "effects"),
    # the view cache: derived, deletable projections per task (read through, checked against the stream)
    "intentlog.viewcache": (3.1, "view cache"),
    "intentlog.viewcache.store": (3.1, "view cache"),
    "intentlog.viewcache.index": (3.1, "view cache"),
    "intentlog.checker": (3.1, "checker"),
    "intentlog.checker.*": (3.1, "checker"),
    "intentlog.checkpoints": (3.2, "built on effects"),
    "intentlog.compile": (3.2, "built on effects"),
    "intentlog.sessions.turns": (3.2, "built on effects"),  # a session's turns: Turn, and a turn being asked
    # the HTML report: reads streams, objects and the checker; the bundle export writes one
    "intentlog.report": (3.2, "report"),
    "intentlog.report.*": (3.2, "report"),
    "intentlog.sessions": (3.3, "composed"),
    "intentlog.http.*": (3.3, "composed"),
    "intentlog.bundle.*": (3.3, "composed"),
    "intentlog.retention.*": (3.3, "composed"),
    # the object store's retention storage: written against the retention seam it implements
    "intentlog.s3.gcsource": (3.3, "composed"),
    # where a ledger lives (one protocol) and its two implementations, the folder and the object store:
    # each answers for gc, verify, repair, a task's stream and the backlog's lease facts
    "intentlog.ledgerstorage": (3.3, "composed"),
    "intentlog.folderstorage": (3.3, "composed"),
    "intentlog.s3.ledgerstorage": (3.3, "composed"),
    # which reads (a folder's, or a store's seams with its seals and gc log) verify, report and export get
    "intentlog.ledgerreads": (3.1, "checker"),
    # 4 the facade over one task's stream; 5 the ledger that hands tasks out
    "intentlog.task": (4, "facade"),
    "intentlog.ledger": (5, "ledger"),
    # backlogs: items as tasks, run by a supervisor; beside the facade they use (the ledger hands one out)
    "intentlog.backlog": (4, "backlog"),
    "intentlog.backlog.*": (4, "backlog"),
    # merging two ledgers through the seams (and verifying a folder destination)
    "intentlog.merge": (5, "ledger"),
    # 6 the public face and the read-side views over a whole ledger
    "intentlog": (6, "public"),
    "intentlog.views": (6, "public"),
    "intentlog.pytest_plugin": (6, "public"),
    # integrations with agent frameworks (optional extras), written on the public face and imported by nothing:
    # LangGraph's checkpointer and at-most-once tools, pydantic-ai's durability capability
    "intentlog.langgraph": (6, "integrations"),
    "intentlog.langgraph.*": (6, "integrations"),
    "intentlog.pydantic_ai": (6, "integrations"),
    # 7-9 applications: the demo, the command line's shared core, its commands, its entry points
    "intentlog.demo.*": (7, "applications"),
    "intentlog.cli.app": (7, "applications"),
    # verify and seal on an s3:// root (the verify and seal commands call them)
    "intentlog.cli.storeroot": (7, "applications"),
    "intentlog.cli.*": (8, "applications"),
    "intentlog.cli": (9, "applications"),
    "intentlog.cli.__main__": (9, "applications"),
}

# Today's imports that point up, as (importer, imported, how): module, function or type.
# They are being removed (the stream core takes Task's place below the facade); delete an
# entry with the import it names -- test_the_allowlists_hold_no_stale_entries says when.
UPWARD_ALLOWED: set[tuple[str, str, str]] = {
    # the shared aliases (and the effect options' TypedDicts) name the retry policy, the
    # provider's window and the redaction rule for typing only
    ("intentlog._internal.types", "intentlog.dedup", "type"),
    ("intentlog._internal.types", "intentlog.effects.policy", "type"),
    ("intentlog._internal.types", "intentlog.eventlog.canonical", "type"),
    # features (and the disk-reading checker in projections/) take the Ledger instead of the layout and store
    ("intentlog.heads", "intentlog.ledger", "type"),
    # the checker's names at their former path (tests and docs import them there); nothing else does
    ("intentlog.projections.verify", "intentlog.checker.report", "module"),
    ("intentlog.projections.verify", "intentlog.checker.verify", "module"),
    ("intentlog.projections.verify", "intentlog.checker.walk", "module"),
    # the bundle writer takes __version__ from the package face (which imports everything)
    ("intentlog.bundle.check", "intentlog", "module"),
    ("intentlog.bundle.readme", "intentlog", "module"),
}

_PY_MODULES = {_module_name(f): f for f in sorted(PKG.rglob("*.py"))}


def rank_of(module: str) -> tuple[float, str] | None:
    """The rank of ``module``: its own entry, else the longest ``pkg.*`` pattern above it."""
    if module in RANKS:
        return RANKS[module]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        hit = RANKS.get(".".join(parts[:n]) + ".*")
        if hit is not None:
            return hit
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str) -> str | None:
    """The intentlog module ``name`` is or lies in (``intentlog.x.Thing`` -> ``intentlog.x``)."""
    while name and name not in _PY_MODULES:
        name = name.rpartition(".")[0]
    return name or None


def classified_imports(path: Path) -> set[tuple[str, str]]:
    """Every intentlog module ``path`` imports, with how: ``module``, ``function`` or ``type``."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[tuple[str, str]] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            mod = ".".join([*base, node.module] if node.module else base)
        else:
            mod = node.module or ""
        return [f"{mod}.{a.name}" for a in node.names]

    def walk(node: ast.AST, how: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in targets(child):
                    mod = _resolve(name) if name.startswith("intentlog") else None
                    if mod is not None and mod != me:
                        found.add((mod, how))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    walk(ast.Module(body=[stmt], type_ignores=[]), "type")
                for stmt in child.orelse:
                    walk(ast.Module(body=[stmt], type_ignores=[]), how)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, "function" if how == "module" else how)
            else:
                walk(child, how)

    walk(ast.parse(path.read_text(), str(path)), "module")
    return found


def _all_imports() -> dict[str, set[tuple[str, str]]]:
    return {m: classified_imports(f) for m, f in _PY_MODULES.items()}


def upward_imports() -> set[tuple[str, str, str]]:
    """Every import from a module to one of a higher rank, as (importer, imported, how)."""
    up = set()
    for me, imported in _all_imports().items():
        mine = rank_of(me)
        for mod, how in imported:
            theirs = rank_of(mod)
            if mine is not None and theirs is not None and theirs[0] > mine[0]:
                up.add((me, mod, how))
    return up


def test_every_module_has_a_rank() -> None:
    """The table ranks every module in the package (a new module is ranked when it is added)."""
    assert [m for m in _PY_MODULES if rank_of(m) is None] == []


def test_the_import_classifier_tells_module_function_and_type_imports_apart() -> None:
    """classified_imports sees deferred and type-only imports (so the rank check can fail on them)."""
    seen = classified_imports(PKG / "cli" / "verify_export.py")
    assert ("intentlog.cli.app", "module") in seen
    assert ("intentlog.heads", "function") in seen
    assert ("intentlog.ledger", "type") in classified_imports(PKG / "heads" / "__init__.py")


def test_the_rank_check_reports_an_import_that_points_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranking the damage assessment above the folder storage makes the folder's repair import of it an upward one."""
    monkeypatch.setitem(RANKS, "intentlog.eventlog.damage", (9, "test"))
    assert ("intentlog.folderstorage", "intentlog.eventlog.damage", "module") in upward_imports()


def test_no_import_points_up() -> None:
    """No module imports one of a higher rank, at module level, in a function or for typing only."""
    unexpected = sorted(upward_imports() - UPWARD_ALLOWED)
    rendered = [f"{a} ({rank_of(a)}) imports {b} ({rank_of(b)}) [{how}]" for a, b, how in unexpected]
    assert rendered == []


def test_counts_of_each_kind_of_import_are_reported() -> None:
    """The three kinds are counted (the upward ones printed), so a report can quote them."""
    counts = {"module": 0, "function": 0, "type": 0}
    for imported in _all_imports().values():
        for _mod, how in imported:
            counts[how] += 1
    up = upward_imports()
    print("imports:", counts, "upward:", {k: sum(1 for u in up if u[2] == k) for k in counts})
    assert counts["module"] > 0 and counts["function"] > 0 and counts["type"] > 0


# -- no import cycles ----------------------------------------------------------------------------------
#
# Same-rank imports are allowed, so the rank table alone lets two modules of one rank import
# each other. A cycle is caught here over all three kinds of import (module level, deferred into
# a function, type-only): a deferred import that closes a loop is still a loop a reader has to
# untangle, and a type-only one still says the two modules cannot be understood apart.


def import_cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every strongly connected set of two or more modules in ``graph`` (default: the package's imports)."""
    if graph is None:
        graph = {m: {d for d, _how in imported if d != m} for m, imported in _all_imports().items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, succ = work[-1]
            advanced = False
            for nxt in succ:
                if nxt not in graph:
                    continue
                if nxt not in order:
                    order[nxt] = low[nxt] = len(order)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], order[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_cycle_check_finds_a_loop_through_any_kind_of_import() -> None:
    """A three-module loop is one component; a chain beside it is none (so the check can fail)."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a loop, by any kind of import."""
    assert import_cycles() == []


# -- no reaching into another module's private names ----------------------------------------------------
#
# A leading underscore means "this module's own": another module that needs it is missing a
# contract. Three shapes are caught by reading the code (no type inference):
#   from x import _name          -- x another intentlog module, _name not a module
#   alias._name                  -- alias an intentlog module or a name imported from one
#   obj._name                    -- any other object, when this module defines no _name itself
#                                   (so it can only be another module's: task._mutex)
# ``self``/``cls`` and objects from outside intentlog (os._exit, a namedtuple's _replace) are
# not checked. Modules are the unit: a private module such as _fsutil may be imported by its
# package, its public names used; only names with a leading underscore are private.

_NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

# Today's reaches into other modules' privates, as (module, name). Being removed; delete an
# entry with its last use -- test_the_allowlists_hold_no_stale_entries says when.
# No module reaches into another's private names; a new reach fails the test (name the
# contract instead: a public-in-package name, as the stream core does for Task's old privates).
PRIVATE_ALLOWED: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.Module) -> set[str]:
    """Private names this module defines: functions, classes, assignments, attributes set, slots."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value):
            own.add(node.value)  # __slots__ entries, getattr(self, "_x") names
        elif isinstance(node, ast.arg):
            own.add(node.arg)
    return {n for n in own if _private(n)}


def private_reaches(path: Path, module: str | None = None) -> set[tuple[str, str]]:
    """Every (module, private name) that ``path`` (the module ``module``) takes from another intentlog module."""
    me = module or _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    own = _own_names(tree)
    ours: dict[str, str] = {}  # local alias -> the intentlog module it came from
    foreign: set[str] = set()  # local names bound to imports from outside intentlog
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                local = a.asname or a.name.partition(".")[0]
                (ours.__setitem__(local, a.name) if a.name.startswith("intentlog") else foreign.add(local))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for a in node.names:
                local = a.asname or a.name
                if not mod.startswith("intentlog"):
                    foreign.add(local)
                    continue
                ours[local] = f"{mod}.{a.name}" if f"{mod}.{a.name}" in _PY_MODULES else mod
                if _private(a.name) and f"{mod}.{a.name}" not in _PY_MODULES and _resolve(mod) != me:
                    found.add((mod, a.name))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)) or node.attr in _NAMEDTUPLE_API:
            continue
        base = node.value
        if isinstance(base, ast.Name):
            if base.id in ("self", "cls") or base.id in foreign:
                continue
            if base.id in ours:
                found.add((ours[base.id], node.attr))
                continue
        if node.attr not in own:
            found.add(("?", node.attr))  # whose it is needs types; the name says enough
    return found


def all_private_reaches() -> set[tuple[str, str]]:
    """(module, "owner:_name") for every private reach in the package."""
    return {(m, f"{owner}:{name}") for m, f in _PY_MODULES.items() for owner, name in private_reaches(f)}


def test_the_private_check_sees_each_shape(tmp_path: Path) -> None:
    """An import of a private name, a private attribute of an imported name and of another module's object."""
    src = tmp_path / "probe.py"
    code = (
        "from ..eventlog.format import _KIND_RE\n"
        "from .. import task as t\n"
        "def f(task: object) -> object:\n"
        "    t._x\n"
        "    return task._mutex\n"
    )
    src.write_text(code)
    got = private_reaches(src, "intentlog.cli.probe")
    assert got == {("intentlog.eventlog.format", "_KIND_RE"), ("intentlog.task", "_x"), ("?", "_mutex")}


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """No module imports or uses a private name of another (beyond the commented allowlist)."""
    assert sorted(all_private_reaches() - PRIVATE_ALLOWED) == []


def test_the_allowlists_hold_no_stale_entries() -> None:
    """Every allowlisted upward import and private reach still exists: fixed ones leave the list."""
    assert sorted(UPWARD_ALLOWED - upward_imports()) == []
    assert sorted(PRIVATE_ALLOWED - all_private_reaches()) == []


def test_the_stale_check_fails_on_an_entry_that_no_longer_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """An allowlist entry with nothing left to allow is reported (so the lists only shrink)."""
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_ALLOWED", PRIVATE_ALLOWED | {("intentlog.views", "?:_gone")})
    with pytest.raises(AssertionError):
        test_the_allowlists_hold_no_stale_entries()
    monkeypatch.undo()
    monkeypatch.setattr(
        sys.modules[__name__], "UPWARD_ALLOWED", UPWARD_ALLOWED | {("intentlog.errors", "intentlog.cli", "type")}
    )
    with pytest.raises(AssertionError):
        test_the_allowlists_hold_no_stale_entries()


# -- every module imports on its own --------------------------------------------------------------

_IMPORT_EACH = """
import importlib, json, pkgutil, sys
import intentlog
names = sorted(m.name for m in pkgutil.walk_packages(intentlog.__path__, "intentlog."))
failed = {}
for name in names:
    for loaded in [m for m in sys.modules if m == "intentlog" or m.startswith("intentlog.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if "install" not in str(exc):  # an optional extra's own message names the extra to install
            failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"checked": len(names), "failed": failed}))
"""


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """Each module, imported before any other of the package, loads: no import cycle hides behind an import order.

    A CLI command imports its feature lazily, often first of all; a cycle between two
    features (the report and the bundle that embeds it) only shows in that order.
    """
    out = subprocess.run([sys.executable, "-c", _IMPORT_EACH], capture_output=True, text=True, check=True, timeout=300)
    got = json.loads(out.stdout)
    assert got["checked"] > 100
    assert got["failed"] == {}
