"""verify_bundle.py's kinds table and format constants are generated from intentlog's schema, and agree with it.

The standalone verifier keeps its own predicates (independent code); the data -- which
kinds exist, which fields each has, which predicate checks each field, the format
strings -- is written by tools/gen_bundle_tables.py. Regenerating gives no diff, and each
field's predicate accepts exactly the values the library's field type accepts.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import intentlog
from intentlog.projections.fields import STR, FieldType, list_of
from intentlog.projections.schema import RULES

ROOT = Path(__file__).resolve().parent.parent
VERIFIER = Path(intentlog.__file__).parent / "verify_bundle.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _load(ROOT / "tools" / "gen_bundle_tables.py", "gen_bundle_tables_under_test")


@pytest.fixture(scope="module")
def bundle() -> ModuleType:
    return _load(VERIFIER, "verify_bundle_tables_under_test")


def test_regenerating_the_tables_gives_no_diff(gen: ModuleType) -> None:
    """verify_bundle.py as shipped is exactly what the generator writes from today's schema."""
    source = VERIFIER.read_text(encoding="utf-8")
    assert gen.render(source) == source, "run: python tools/gen_bundle_tables.py"


def test_the_generator_refuses_what_the_verifier_cannot_express(gen: ModuleType) -> None:
    """A field type without a spec (defined outside intentlog) is an error, never a silently dropped field."""
    with pytest.raises(ValueError, match="without a spec"):
        gen.expression(FieldType("an even number", lambda v: v % 2 == 0).spec, "x.y f")
    assert gen.expression(list_of(STR).spec, "x.y f") == "list_of(is_str)"
    with pytest.raises(ValueError, match="no predicate"):
        gen.expression(("tuple", ("str",)), "x.y f")


def test_a_stale_block_is_rewritten(gen: ModuleType) -> None:
    """Hand edits inside a generated block do not survive regeneration; a missing block is an error."""
    source = VERIFIER.read_text(encoding="utf-8")
    edited = source.replace('"task.failed": (', '"task.failed": (  # edited', 1)
    assert edited != source and gen.render(edited) == source
    with pytest.raises(ValueError, match="generated kinds"):
        gen.render(source.replace("# <generated kinds>", "# kinds"))


DIGEST = "blake3:" + "0" * 64
SAMPLES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    2,
    -1,
    2**63,
    1.5,
    -0.5,
    0.0,
    "",
    "x",
    "blake3:short",
    DIGEST,
    DIGEST.upper(),
    {},
    {"a": 1},
    {"a": DIGEST},
    {"a": None},
    {"digest": DIGEST, "size": 3},
    {"digest": DIGEST, "size": -1},
    {"digest": DIGEST, "size": True},
    {"digest": DIGEST, "size": 3, "media_type": None},
    {"digest": DIGEST, "size": 3, "media_type": 7},
    {"digest": DIGEST, "size": 3, "media_type": "text/plain"},
    {"digest": DIGEST},
    {"file": "quarantine/x", "digest": DIGEST, "size": 0},
    {"file": 1, "digest": DIGEST, "size": 0},
    {"file": "q", "digest": DIGEST, "size": -2},
    [],
    [1],
    ["x"],
    [None],
    [DIGEST],
    [{"digest": DIGEST, "size": 3}],
    [{}],
    [True],
]


def _one_of_values(spec: Any) -> list[str]:
    if not isinstance(spec, tuple):
        return []
    if spec and spec[0] == "one_of":
        return list(spec[1:]) + [v.upper() for v in spec[1:]]
    return [x for part in spec[1:] for x in _one_of_values(part)]


def _fields() -> list[tuple[str, str, str, FieldType]]:
    return [
        (kind, where, name, t)
        for kind, rule in sorted(RULES.items())
        for where, fields in (("required", rule.required), ("optional", rule.optional))
        for name, t in fields.items()
    ]


def test_every_field_is_checked_alike_by_both_verifiers(bundle: ModuleType) -> None:
    """For every kind and field, verify_bundle.py's predicate and the library's field type agree on every sample."""
    disagreements = []
    for kind, where, name, t in _fields():
        required, optional = bundle.KINDS[kind]
        check = (required if where == "required" else optional)[name]
        extra = _one_of_values(t.spec)
        samples = SAMPLES + extra + [[x] for x in extra] + [{"k": x} for x in extra]
        for value in samples:
            if bool(t.check(value)) != bool(check(value)):
                disagreements.append(f"{kind} {where} {name}: {value!r} library={t.check(value)} bundle={check(value)}")
    assert not disagreements, "\n".join(disagreements[:20])


def test_the_kinds_table_names_the_same_fields_with_the_same_types(bundle: ModuleType, gen: ModuleType) -> None:
    """Kinds, required and optional field names, and each field's type spec, as the library registers them."""
    assert sorted(bundle.KINDS) == sorted(RULES)
    for kind, rule in RULES.items():
        required, optional = bundle.KINDS[kind]
        assert list(required) == list(rule.required) and list(optional) == list(rule.optional), kind
        for name, t in itertools.chain(rule.required.items(), rule.optional.items()):
            assert t.spec is not None, f"{kind} {name}"
            assert gen.expression(t.spec, kind) in VERIFIER.read_text(encoding="utf-8")


def test_the_format_constants_are_the_library_s(bundle: ModuleType) -> None:
    """The format strings verify_bundle.py compares are the ones intentlog writes."""
    from intentlog.bundle import HASHES_FORMAT, STATES_FORMAT
    from intentlog.eventlog.format import FORMAT, RESERVED_PREFIXES
    from intentlog.heads.codec import HEADS_FORMAT
    from intentlog.projections.workstate import WORK_STATE_VERSION

    assert (bundle.LEDGER_FORMAT, bundle.HEADS_FORMAT, bundle.STATES_FORMAT, bundle.HASHES_FORMAT) == (
        FORMAT,
        HEADS_FORMAT,
        STATES_FORMAT,
        HASHES_FORMAT,
    )
    assert bundle.WORKSTATE_VERSION == WORK_STATE_VERSION and bundle.RESERVED == RESERVED_PREFIXES
    assert bundle.ENVELOPE == ("data", "kind", "prev", "seq", "ts")
    assert {k: r.files for k, r in RULES.items() if r.files} == bundle.FILE_FIELDS
