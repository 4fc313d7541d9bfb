"""pytest plugin: record a test's HTTP calls once into a ledger folder, then replay them offline.

The job people use vcrpy for, with the ledger as the cassette: requests are matched by
their canonical hash (method, URL, the headers that matter, the body — see
``intentlog.http``), credentials are redacted before anything is written, every recorded
byte is hashed, and ``intentlog verify`` checks a cassette like any ledger.

::

    def test_summary(intentlog_replay):
        client = openai.OpenAI(http_client=intentlog_replay.client(), max_retries=0)
        assert "summary" in client.chat.completions.create(...).choices[0].message.content

Modes (``--intentlog-mode``, or the ``intentlog_mode`` ini option; the command line wins):

``replay`` (default)
    No network at all: answers come from the cassette. A request that is not in it, or
    whose hash differs from the recorded one, raises :class:`intentlog.http.NotRecorded`
    naming the request, its key and where it differs — and the test fails at teardown
    even if the code under test swallowed that exception. Nothing is written.
``record``
    The live transport: requests already in the cassette replay from it, new ones go to
    the network and are recorded.
``rewrite``
    The cassette is deleted (only if it is a ledger folder) and everything is recorded again.

The cassette of a test is the ledger folder
``<test file's folder>/<intentlog_cassettes ini, default "cassettes">/<module>/<test name>``,
task ``http``; ``@pytest.mark.intentlog(path="...", task="...", mode="...")`` overrides
the folder (relative to the test file), the task id or the mode for one test.

Register it with the ``pytest11`` entry point ``intentlog.pytest_plugin``, or
``pytest_plugins = ["intentlog.pytest_plugin"]`` / ``-p intentlog.pytest_plugin`` (the
command-line option exists only when the plugin is loaded before the command line is
parsed: entry point, ``-p`` or a root ``conftest.py``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, final

import pytest

import intentlog

from .errors import UsageError

__all__ = ["MODES", "Cassette", "intentlog_replay"]

MODES: Final = ("replay", "record", "rewrite")
DEFAULT_TASK: Final = "http"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("intentlog", "intentlog HTTP record/replay")
    group.addoption(
        "--intentlog-mode",
        choices=MODES,
        default=None,
        help="replay (default: offline, unrecorded requests fail), record (send and record new requests) "
        "or rewrite (delete each cassette and record it again)",
    )
    parser.addini("intentlog_mode", "default mode of the intentlog_replay fixture", default="replay")
    parser.addini(
        "intentlog_cassettes", "folder, next to each test file, holding one ledger per test", default="cassettes"
    )


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember whether the test body failed, so the fixture reports a miss only once."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "intentlog(path=None, task=None, mode=None): cassette folder, task id or mode of intentlog_replay"
    )


def _safe(name: str) -> str:
    """A folder and task-id safe form of a test name (parametrized ids included)."""
    clean = _UNSAFE.sub("_", name).strip("._-") or "test"
    if len(clean) > 100:
        clean = clean[:80] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return clean if clean[0].isalnum() else "t" + clean


@final
class Cassette:
    """What the ``intentlog_replay`` fixture gives a test: clients bound to its cassette."""

    def __init__(self, root: Path, task_id: str, mode: str, node: str) -> None:
        if mode not in MODES:
            raise UsageError(f"intentlog mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.root = root
        self.task_id = task_id
        self.mode = mode
        self.node = node
        self._ledger: intentlog.Ledger | None = None
        self._replay: Any = None  # the offline Replay, in replay mode
        self._restarted = False
        self._errors: list[Exception] = []
        self._clients: list[Any] = []
        if mode == "rewrite" and root.exists():
            if not (root / "intentlog.json").is_file():
                raise UsageError(
                    f"{root} is not an intentlog ledger; refusing to delete it for --intentlog-mode=rewrite"
                )
            shutil.rmtree(root)

    def __repr__(self) -> str:
        return f"<intentlog cassette {str(self.root)!r} mode={self.mode}>"

    @property
    def task(self) -> intentlog.Task:
        """The cassette's task (for ``with cassette.task.key(...):``); only read in replay mode."""
        if self._ledger is None:
            if self.mode == "replay" and not (self.root / "intentlog.json").is_file():
                error = _missing(self.root, self.node)
                self._errors.append(error)
                raise error
            self._ledger = intentlog.open(self.root, create=self.mode != "replay")
        task = self._ledger.task(self.task_id)
        if self._replay is None and self.mode == "replay":
            from . import http

            self._replay = http.replay(task, hint="record it with --intentlog-mode=record")
        elif not self._restarted and self.mode != "replay":
            from . import http

            http.restart(task)  # this test's requests map to the cassette from its start
            self._restarted = True
        return task

    @property
    def misses(self) -> list[Exception]:
        """Every request the cassette could not answer (replay mode)."""
        return [*self._errors, *(self._replay.misses if self._replay is not None else [])]

    def transport(self, *, lib: Any = None, **options: Any) -> Any:
        """A transport of ``lib`` bound to the cassette (``options`` as for ``intentlog.http.transport``)."""
        from . import http

        task = self.task
        if self._replay is not None:
            return self._replay.transport(lib=lib)
        return http.transport(task, lib=lib, **options)

    def async_transport(self, *, lib: Any = None, **options: Any) -> Any:
        from . import http

        task = self.task
        if self._replay is not None:
            return self._replay.async_transport(lib=lib)
        return http.async_transport(task, lib=lib, **options)

    def client(self, *, lib: Any = None, **kwargs: Any) -> Any:
        """A ``lib`` client (``"httpx"`` default, ``"httpx2"`` for anthropic 2.x) bound to the cassette."""
        from . import http

        task = self.task
        made = (
            self._replay.client(lib=lib, **kwargs) if self._replay is not None else http.client(task, lib=lib, **kwargs)
        )
        self._clients.append(made)
        return made

    def async_client(self, *, lib: Any = None, **kwargs: Any) -> Any:
        """The async counterpart of :meth:`client` (close it yourself: ``async with``)."""
        from . import http

        task = self.task
        if self._replay is not None:
            return self._replay.async_client(lib=lib, **kwargs)
        return http.async_client(task, lib=lib, **kwargs)

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        if self._ledger is not None:
            self._ledger.close()


def _missing(root: Path, node: str) -> Exception:
    from .http import NotRecorded

    return NotRecorded(
        request="any request",
        request_hash="-",
        key="-",
        record=str(root),
        reason=f"cannot be answered: {node} has no cassette",
        hint="record it with --intentlog-mode=record",
    )


def _mode(request: pytest.FixtureRequest, marker: pytest.Mark | None) -> str:
    if marker is not None and marker.kwargs.get("mode"):
        return str(marker.kwargs["mode"])
    cli = request.config.getoption("intentlog_mode", default=None)
    if cli:
        return str(cli)
    try:
        ini = request.config.getini("intentlog_mode")
    except ValueError:  # the plugin was loaded after the ini options were registered
        ini = None
    return str(ini or "replay")


def _cassettes_dir(request: pytest.FixtureRequest) -> str:
    try:
        return str(request.config.getini("intentlog_cassettes") or "cassettes")
    except ValueError:
        return "cassettes"


@pytest.fixture
def intentlog_replay(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """A cassette for this test: ``.client()`` / ``.async_client()`` record or replay its HTTP calls."""
    marker = request.node.get_closest_marker("intentlog")
    base = Path(str(request.path)).parent
    module = _safe(Path(str(request.path)).stem)
    path = marker.kwargs.get("path") if marker is not None else None
    root = base / str(path) if path else base / _cassettes_dir(request) / module / _safe(request.node.name)
    task_id = str(marker.kwargs.get("task") or DEFAULT_TASK) if marker is not None else DEFAULT_TASK
    cassette = Cassette(root, task_id, _mode(request, marker), request.node.nodeid)
    try:
        yield cassette
    finally:
        cassette.close()
    misses = cassette.misses
    if misses and not request.node.stash.get(_CALL_FAILED, False):  # else the test already failed on it
        lines = "\n".join(f"  - {m}" for m in misses)
        pytest.fail(f"intentlog replay: {len(misses)} request(s) not answered from the record:\n{lines}", pytrace=False)
