"""The one artifact-reference walker: gc keeps at least what verify checks and export copies.

retention's safety rests on it: a blob that verify or export needs must be named by the
walk retention does (``KEEP``), or gc deletes bytes the record still points to. Checked
on generated event data holding refs (with and without inline bytes, with more refs in
their other keys), bare digests, digests inside strings and as keys -- first on the
walker's filters, then end to end: after gc, verify passes and export succeeds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import plain_keys, scalars

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.artifacts.inline import inline_ref
from intentlog.bundle import export_bundle
from intentlog.projections.verify import verify_ledger
from intentlog.refs import CHECK, CHECK_REFS, EXPORT, EXPORT_INLINE, INLINE, KEEP, Found, walk
from intentlog.retention import apply_gc, keep

_POOL = [bytes([65 + i]) * (5000 + i) for i in range(3)]  # stored blobs (over INLINE_MAX)
_SMALL = [b"small-%d" % i for i in range(2)]  # payloads that ride inline


def _ref_of(data: bytes) -> dict[str, Any]:
    return {"digest": digest_bytes(data), "size": len(data)}


def _leaves() -> st.SearchStrategy[Any]:
    stored = st.sampled_from(_POOL).map(_ref_of)
    inline = st.sampled_from(_SMALL).map(lambda b: dict(inline_ref(b)))
    with_type = stored.map(lambda r: {**r, "media_type": "application/json"})
    digest = st.sampled_from(_POOL).map(lambda b: _ref_of(b)["digest"])
    embedded = st.tuples(st.text(max_size=3), digest, st.text(max_size=3)).map("".join)
    return scalars | stored | inline | with_type | digest | embedded


def _keys() -> st.SearchStrategy[str]:
    return plain_keys | st.sampled_from(["digest", "size", "inline", "media_type"])


def _values() -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        base = st.sampled_from(_POOL).map(_ref_of) | st.sampled_from(_SMALL).map(lambda b: dict(inline_ref(b)))
        ref_with_more = st.tuples(base, st.dictionaries(plain_keys, inner, max_size=2))
        return (
            st.lists(inner, max_size=4)
            | st.dictionaries(_keys(), inner, max_size=4)
            | ref_with_more.map(lambda p: {**p[1], **p[0]})  # a ref whose other keys hold more refs
        )

    return st.recursive(_leaves(), extend, max_leaves=10)


event_data = st.dictionaries(plain_keys, _values(), max_size=4)


def _digests(found: list[Found]) -> set[str]:
    return {digest for digest, _ in found}


@given(event_data)
def test_keep_names_every_digest_any_other_walk_names(data: dict[str, Any]) -> None:
    """Whatever verify (CHECK, CHECK_REFS), export (EXPORT, EXPORT_INLINE) or an inline search names, KEEP names."""
    kept = _digests(list(walk(data, KEEP)))
    for other in (CHECK, CHECK_REFS, EXPORT, EXPORT_INLINE, INLINE):
        assert _digests(list(walk(data, other))) <= kept, other


@given(event_data)
def test_keep_holds_exactly_the_inline_payloads(data: dict[str, Any]) -> None:
    """The objects KEEP reports are exactly the inline payloads INLINE finds."""
    held = {digest for digest, ref in walk(data, KEEP) if ref is not None}
    assert held == {digest for digest, ref in walk(data, INLINE) if ref is not None}


def test_the_filters_differ_where_they_say() -> None:
    """A ref inside a ref's other keys: verify, export and retention all see it; only retention reads keys and text."""
    outer, inner = _ref_of(_POOL[0]), _ref_of(_POOL[1])
    data = {"x": {**outer, "meta": {"nested": inner}}, f"{inner['digest']}": 1, "s": f"see {outer['digest']}!"}
    assert _digests(list(walk(data, CHECK))) == {outer["digest"], inner["digest"]}
    assert _digests(list(walk(data, EXPORT))) == {outer["digest"], inner["digest"]}
    assert _digests(list(walk(data, KEEP))) == {outer["digest"], inner["digest"]}  # the key and the text too
    assert [digest for digest, _ in walk({"k": data["s"]}, KEEP)] == [outer["digest"]]
    assert list(walk({"k": data["s"]}, EXPORT)) == []  # export counts whole-string digests only


def test_walks_are_iterative() -> None:
    """Data nested far deeper than the recursion limit is walked without RecursionError."""
    deep: Any = _ref_of(_POOL[2])
    for _ in range(5000):
        deep = {"a": [deep]}
    assert _digests(list(walk(deep, KEEP))) == {_ref_of(_POOL[2])["digest"]}


LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(event_data)
def test_after_gc_verify_passes_and_export_succeeds(tmp_path_factory: Any, data: dict[str, Any]) -> None:
    """End to end: a kept task's event holds generated refs; gc deletes the orphan and no blob the record needs."""
    root: Path = tmp_path_factory.mktemp("led")
    led = intentlog.open(root)
    for blob in _POOL:
        led.artifacts.put(blob)
    orphan = led.artifacts.put(b"orphan" * 2000)
    led.task("t").append("note", data)
    led.task("t").close()
    keep(led, "t")
    apply_gc(led, grace=0, now=LATER)
    assert not led.artifacts.path_for(orphan.digest).exists()  # gc ran and deleted something
    needed = _digests(list(walk(data, EXPORT))) | _digests(list(walk(data, CHECK)))
    for digest in needed:
        if digest not in {d for d, ref in walk(data, INLINE) if ref is not None}:
            assert led.artifacts.path_for(digest).exists(), digest
    report = verify_ledger(led)
    assert report.ok, report
    export_bundle(root, out=root.parent / f"{root.name}-bundle")
    led.close()


def test_verify_reports_a_missing_blob_named_inside_a_refs_other_keys(tmp_path: Path) -> None:
    """A ref inside another ref's extra key names bytes export requires; verify must say they are missing."""
    led = intentlog.open(tmp_path / "led")
    outer = led.artifacts.put(_POOL[0]).to_json()
    led.task("t").append("note", {"x": {**outer, "meta": {"nested": _ref_of(b"never stored" * 500)}}})
    led.task("t").close()
    with pytest.raises(intentlog.ArtifactMissing):
        export_bundle(led.root, out=tmp_path / "b")  # export refuses: the nested blob is missing
    assert not verify_ledger(led).ok  # verify says OK today
    led.close()
