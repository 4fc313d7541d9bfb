"""The conformance probe: may this store be written to?

A ledger on an object store keeps one writer per stream only if the store's conditional
create is real: a second create of a key must be refused, and of many racing creates of
one key exactly one may win (several S3-compatible servers have shipped races here, and a
store that ignores ``If-None-Match`` would let two writers fork a stream silently).
:func:`probe_store` checks both on throw-away keys under ``_probe/`` and removes them;
:func:`require_fencing` runs it once per store per process before the first write and
raises :class:`~intentlog.errors.StoreRefused` when it fails, so nothing is written there.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from ..errors import LedgerError, StoreRefused
from .client import ObjectClient, unreachable

__all__ = ["ProbeCheck", "ProbeReport", "probe_store", "require_fencing"]

#: How many creates race for one key in ``intentlog doctor``.
RACERS = 32
#: How many race in the probe run before a store's first write (SeaweedFS takes seconds to settle 32).
OPEN_RACERS = 8

#: the check a probe that could not reach the store fails
REACHABLE = "store reachable"

_passed: set[str] = set()
_passed_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ProbeCheck:
    """One check of the probe: its name, whether the store passed, and what was seen."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What :func:`probe_store` found about one store."""

    root: str
    checks: list[ProbeCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def unreached(self) -> bool:
        """Whether the probe failed only because the store could not be reached (nothing shows it cannot fence)."""
        failed = [c for c in self.checks if not c.ok]
        return bool(failed) and all(c.name == REACHABLE and unreachable(c.detail) for c in failed)

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, object]:
        checks = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks]
        return {"root": self.root, "ok": self.ok, "checks": checks}


def _second_create(client: ObjectClient, base: str) -> ProbeCheck:
    key = f"{base}/once"
    first = client.create(key, b"first")
    second = client.create(key, b"second")
    stored = client.get(key)
    if not first:
        return ProbeCheck("second create refused", False, "the first conditional create of a new key was refused")
    if second or stored != b"first":
        seen = f"a second conditional create was accepted (the key now holds {stored!r})"
        return ProbeCheck("second create refused", False, seen)
    return ProbeCheck("second create refused", True, "the second create of one key was refused; the first bytes stayed")


def _race(client: ObjectClient, base: str, racers: int) -> ProbeCheck:
    key = f"{base}/race"
    barrier = threading.Barrier(racers)
    wins: list[int] = []
    errors: list[str] = []

    def racer(i: int) -> None:
        try:
            barrier.wait(10)
            if client.create(key, b"racer %d" % i):
                wins.append(i)
        except (LedgerError, threading.BrokenBarrierError) as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = client.get(key)
    if errors:
        return ProbeCheck("one winner among racers", False, f"{len(errors)} of {racers} creates failed: {errors[0]}")
    if len(wins) != 1 or stored != b"racer %d" % wins[0]:
        seen = f"{len(wins)} of {racers} racing creates won; the key holds {stored!r}"
        return ProbeCheck("one winner among racers", False, seen)
    return ProbeCheck("one winner among racers", True, f"1 of {racers} racing creates won, {racers - 1} refused")


def probe_store(client: ObjectClient, *, racers: int = RACERS) -> ProbeReport:
    """Check the store's conditional create on fresh keys under ``_probe/`` (removed after).

    A transport error is a failed check (the store could not be shown to fence), not an exception.
    """
    base = f"_probe/{secrets.token_hex(8)}"
    report = ProbeReport(client.describe())
    try:
        report.checks.append(_second_create(client, base))
        report.checks.append(_race(client, base, racers))
    except LedgerError as exc:
        report.checks.append(ProbeCheck(REACHABLE, False, str(exc)))
    finally:
        for key in (f"{base}/once", f"{base}/race"):
            try:
                client.delete(key)
            except LedgerError:
                pass  # leftovers under _probe/ are harmless and named as such
    return report


def require_fencing(client: ObjectClient) -> None:
    """Probe the store once per process (per location); ``StoreRefused`` if it cannot fence writers."""
    root = client.describe()
    with _passed_lock:
        if root in _passed:
            return
    report = probe_store(client, racers=OPEN_RACERS)
    if report.unreached:
        raise LedgerError(
            f"{root}: cannot reach the store, so whether it fences writers is unknown "
            f"({'; '.join(report.failures())}); nothing was written: try again once it answers"
        )
    if not report.ok:
        raise StoreRefused(root, report.failures())
    with _passed_lock:
        _passed.add(root)
