"""The experiment's plan, preregistered: hypotheses, cases, predictions, and what counts as a pass.

:func:`preregistration` is written to ``preregistration.json`` before any case runs;
the standalone verifier holds every measurement to the predictions written here, so a
prediction cannot be adjusted after the fact without the record showing it.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["CASES", "CORRUPTIONS", "HYPOTHESES", "PASS", "PLAN_FORMAT", "REPROJECTED", "case_plan"]

PLAN_FORMAT: Final = "intentlog-demo-preregistration/1"

HYPOTHESES: Final = {
    "H1": "A call killed after its manifest, with no attempt started, is resumed by another process from the "
    "record alone and reaches the provider exactly once, with the request hash the manifest recorded.",
    "H2": "A resume whose rebuilt request no longer matches the recorded intent is refused before anything is "
    "sent or appended.",
    "H3": "An attempt that started with nothing observed after it projects 'effect unknown' and resume refuses "
    "it; a naive restart of an identical copy, run through the library, pays the provider a second time for "
    "the byte-identical request under the same idempotency key, and the record shows both attempts.",
    "H4": "After a recorded observation, or a recorded refusal and retry decision, finishing the call needs no "
    "second served request.",
    "H5": "An interrupted or failed context compilation is recoverable from the record with the inventory it was "
    "offered, and with the missing required id derived.",
    "H6": "Every inspection appends nothing, and an independent re-derivation from the exported events agrees "
    "with every state the inspecting processes recorded.",
}

#: Each case: how it is interrupted, the steps after, and the predictions the verifier holds it to.
#: ``first`` / ``last``: the task's call or compilation states at the first and last inspection.
CASES: Final[list[dict[str, Any]]] = [
    {
        "case": "1-killed-after-manifest",
        "hypothesis": "H1",
        "story": "killed right after call.manifest, then resumed by another process",
        "interrupt": "SIGKILL right after call.manifest is durable",
        "behaviour": {},
        "steps": ["produce --kill after-manifest", "inspect before", "resume", "inspect after"],
        "first": {"calls": {"call-1": ["manifest_recorded", "start call", "none"]}, "next_operation": "start call"},
        "last": {
            "calls": {"call-1": ["superseded", "none", "none"], "call-2": ["completed", "none", "happened"]},
            "next_operation": "check and accept",
        },
        "receipts": 1,
        "served": 1,
        "action_appends": True,
    },
    {
        "case": "2-drift-refused",
        "hypothesis": "H2",
        "story": "the same interruption, resumed with another model configured",
        "interrupt": "SIGKILL right after call.manifest is durable",
        "behaviour": {},
        "steps": ["produce --kill after-manifest", "inspect before", "resume --model reviewer-2", "inspect after"],
        "first": {"calls": {"call-1": ["manifest_recorded", "start call", "none"]}, "next_operation": "start call"},
        "last": {"calls": {"call-1": ["manifest_recorded", "start call", "none"]}, "next_operation": "start call"},
        "receipts": 0,
        "served": 0,
        "action_appends": False,
    },
    {
        "case": "3-effect-unknown",
        "hypothesis": "H3",
        "story": "killed while the provider held the request",
        "interrupt": "SIGKILL once the provider's receipt log holds the request",
        "behaviour": {"hold": True},
        "steps": ["produce (provider holds)", "inspect before", "resume", "inspect after"],
        "first": {
            "calls": {"call-1": ["effect_unknown", "reconcile effect", "unknown"]},
            "next_operation": "reconcile effect",
        },
        "last": {
            "calls": {"call-1": ["effect_unknown", "reconcile effect", "unknown"]},
            "next_operation": "reconcile effect",
        },
        "receipts": 1,
        "served": 0,
        "action_appends": False,
    },
    {
        "case": "3b-naive-restart-copy",
        "hypothesis": "H3",
        "story": "a copy of case 3's files (ledger and receipt log), restarted naively through the library",
        "interrupt": "none: a copy of case 3 right after its kill",
        "behaviour": {},
        "steps": ["copy case 3", "inspect before", "naive", "inspect after"],
        "first": {
            "calls": {"call-1": ["effect_unknown", "reconcile effect", "unknown"]},
            "next_operation": "reconcile effect",
        },
        "last": {"calls": {"call-1": ["completed", "none", "happened"]}, "next_operation": "check and accept"},
        "receipts": 2,
        "served": 1,
        "action_appends": True,
        "identical_receipts": True,
        "copy_of": "3-effect-unknown",
    },
    {
        "case": "4-killed-after-observation",
        "hypothesis": "H4",
        "story": "killed after attempt.observed, before interpreting",
        "interrupt": "SIGKILL inside the interpreter, after attempt.observed is durable",
        "behaviour": {},
        "steps": ["produce --kill after-observation", "inspect before", "resume", "inspect after"],
        "first": {"calls": {"call-1": ["observed", "reinterpret", "happened"]}, "next_operation": "reinterpret"},
        "last": {"calls": {"call-1": ["completed", "none", "happened"]}, "next_operation": "check and accept"},
        "receipts": 1,
        "served": 1,
        "action_appends": True,
    },
    {
        "case": "5-compilation-killed",
        "hypothesis": "H5",
        "story": "killed inside a context compilation",
        "interrupt": "SIGKILL inside the selection, after context.compilation_requested is durable",
        "behaviour": {},
        "steps": ["compile --kill mid-compilation", "inspect before", "compile", "inspect after"],
        "first": {"compilations": {"context-16": ["requested", "recompile"]}, "next_operation": "recompile"},
        "last": {"compilations": {"context-16": ["compiled", "none"]}, "next_operation": "none"},
        "receipts": 0,
        "served": 0,
        "action_appends": True,
    },
    {
        "case": "6-compilation-missing-input",
        "hypothesis": "H5",
        "story": "a compilation that requires an id it was never offered",
        "interrupt": "none: the compilation fails on its own",
        "behaviour": {},
        "steps": ["compile --kill missing-input", "inspect"],
        "first": {
            "compilations": {"context-16": ["failed", "fix inputs"]},
            "missing": ["C"],
            "next_operation": "fix inputs",
        },
        "last": {
            "compilations": {"context-16": ["failed", "fix inputs"]},
            "missing": ["C"],
            "next_operation": "fix inputs",
        },
        "receipts": 0,
        "served": 0,
        "action_appends": None,  # no action after the inspection
    },
    {
        "case": "7-refused-then-killed-in-backoff",
        "hypothesis": "H4",
        "story": "the provider refused the first request (429, nothing served); killed while backing off",
        "interrupt": "SIGKILL once attempt.retry_decided is durable, during the backoff",
        "behaviour": {"refuse_first": 429},
        "steps": ["produce --kill in-backoff", "inspect before", "resume", "inspect after"],
        "first": {
            "calls": {"call-1": ["retry_decided", "start next attempt", "happened"]},
            "next_operation": "start next attempt",
        },
        "last": {"calls": {"call-1": ["completed", "none", "happened"]}, "next_operation": "check and accept"},
        "receipts": 2,
        "served": 1,
        "action_appends": True,
    },
]

#: The ledgers a fresh process reopens and projects again, after every case ran.
REPROJECTED: Final = ["1-killed-after-manifest", "3-effect-unknown", "6-compilation-missing-input"]

CORRUPTIONS: Final = [
    "an edited event",
    "a removed event",
    "a changed artifact",
    "a state claim that contradicts its events",
    "a receipt with no recorded attempt",
]

PASS: Final = [
    "every harness claim holds (each case's measured receipts, states and refusals, as listed per case)",
    "every verifier claim holds: each case's exported bundle passes its own verify_bundle.py; each recorded "
    "inspection equals the state re-derived from the exported events it saw, appended nothing, and saw a prefix "
    "of the exported stream; each case's receipts and states match the predictions here; each receipt is covered "
    "by an attempt.started; the fresh re-projections equal the last inspections; the pinned code and this file "
    "are the ones the run used; outbound network was refused",
    "every file of the experiment folder matches the hash inventory written at its end, and none is unlisted",
    "each seeded corruption of case 1's bundle is rejected by meaning alone (the byte inventory bypassed)",
]


def case_plan(name: str) -> dict[str, Any]:
    """The preregistered plan of one case."""
    for c in CASES:
        if c["case"] == name:
            return c
    raise KeyError(name)
