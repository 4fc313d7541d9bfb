"""The canonical request hash (DESIGN §3, §5): exact JSON or refusal, order- and timestamp-blind.

Each property ends by reading the canonical bytes back (``orjson.loads``) rather than
trusting the value that went in.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import (
    BAD_VALUES,
    DROP_NAMES,
    b3,
    bad_values,
    json_objects,
    json_values,
    reorder,
    with_extra_keys,
    with_value_at,
)

import intentlog
from intentlog import CANON_VERSION, NotSerializable, canonicalize, request_hash

REDACTED = "[REDACTED]"


def _sorted_compact(data: bytes) -> None:
    """Assert ``data`` is compact JSON whose objects list their keys in sorted order, at every depth."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert keys == sorted(keys), f"keys not sorted: {keys}"
        return dict(pairs)

    json.loads(data, object_pairs_hook=hook)
    assert orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS) == data, "not compact"


@given(json_values(), st.randoms(use_true_random=False))
def test_key_order_does_not_change_the_hash(value: Any, rnd: Any) -> None:
    """request_hash is equal for values that differ only in the insertion order of their keys, at any depth."""
    shuffled = reorder(value, rnd)
    assert request_hash(shuffled) == request_hash(value)
    a, b = canonicalize(value), canonicalize(shuffled)
    assert a.data == b.data
    assert orjson.loads(b.data) == value


@given(with_extra_keys(DROP_NAMES, json_values(max_leaves=3) | st.just(float("nan"))))
def test_timestamp_fields_are_dropped_at_any_depth(case: tuple[Any, Any, list[str]]) -> None:
    """request_hash ignores ts/timestamp/created_at/updated_at at any depth (even a NaN one) and lists them."""
    original, with_ts, added = case
    c = canonicalize(with_ts)
    assert c.digest == request_hash(original)
    assert sorted(c.dropped) == sorted(added)
    assert orjson.loads(c.data) == original


@given(json_values(), json_values())
def test_different_content_hashes_differently(a: Any, b: Any) -> None:
    """request_hash differs for values that differ in content (keys that are neither dropped nor redacted)."""
    assume(a != b)
    assert request_hash(a) != request_hash(b)
    assert orjson.loads(canonicalize(a).data) == a
    assert orjson.loads(canonicalize(b).data) == b


@given(json_values())
def test_canonical_bytes_are_compact_sorted_json(value: Any) -> None:
    """canonicalize gives compact sorted-key JSON that parses back to the value; digest is BLAKE3 of those bytes."""
    c = canonicalize(value)
    _sorted_compact(c.data)
    assert orjson.loads(c.data) == value
    assert c.digest == b3(c.data)
    assert c.version == CANON_VERSION == "intentlog-canon/4"
    assert (c.dropped, c.redacted) == ((), ())


@given(st.data())
def test_bad_values_are_refused_naming_their_path(data: st.DataObject) -> None:
    """request_hash refuses NaN, inf, sets, bytes, datetimes, dataclasses, >64-bit ints at any depth, naming a path."""
    bad, words = data.draw(bad_values)
    obj, path = data.draw(with_value_at(bad))
    with pytest.raises(NotSerializable) as info:
        request_hash(obj)
    assert info.value.path == path
    assert path in str(info.value)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("bad", "words"), BAD_VALUES, ids=[type(b).__name__ + str(i) for i, (b, _) in enumerate(BAD_VALUES)]
)
def test_each_bad_value_is_refused_at_top_level(bad: Any, words: str) -> None:
    """canonicalize refuses each non-JSON value even as the whole request, with a message naming what it is."""
    with pytest.raises(NotSerializable, match="not serializable at") as info:
        canonicalize(bad)
    assert words in str(info.value)
    assert isinstance(info.value, TypeError)


@given(json_objects(), st.one_of(st.integers(), st.none(), st.booleans(), st.tuples(st.integers())))
def test_non_string_keys_are_refused(value: dict[str, Any], key: Any) -> None:
    """request_hash refuses a dict with a non-string key (orjson would write it as a string), naming the dict's path."""
    nested = {"outer": [{**value, key: 1}]}
    with pytest.raises(NotSerializable) as info:
        request_hash(nested)
    assert info.value.path == "$.outer[0]"
    assert repr(key) in str(info.value)


def test_ints_at_the_64_bit_edges() -> None:
    """request_hash accepts every int orjson writes exactly (-2**63 .. 2**64-1) and refuses one past each edge."""
    for ok in (-(2**63), 2**64 - 1):
        assert orjson.loads(canonicalize({"n": ok}).data) == {"n": ok}
    for bad in (-(2**63) - 1, 2**64):
        with pytest.raises(NotSerializable, match=r"\$\.n: integer exceeds 64 bits"):
            request_hash({"n": bad})


@given(
    with_extra_keys(
        ("api_key", "API_KEY", "Api_Key", "authorization", "Authorization", "AUTHORIZATION"),
        st.text(min_size=1, max_size=10).map(lambda s: "sk-secret-" + s),
    )
)
def test_credentials_are_redacted_at_any_depth(case: tuple[Any, Any, list[str]]) -> None:
    """canonicalize replaces api_key/authorization values (any case, any depth) before hashing and lists their paths."""
    _, with_secrets, added = case
    c = canonicalize(with_secrets)
    assert sorted(c.redacted) == sorted(added)
    assert b"sk-secret-" not in c.data
    assert orjson.loads(c.data) == _replace_secrets(with_secrets, lambda _: REDACTED)
    # the same request with other secrets hashes the same: secrets never reach the hash
    assert request_hash(_replace_secrets(with_secrets, lambda s: s + "-rotated")) == c.digest


def _replace_secrets(value: Any, fn: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: fn(v) if k.lower() in ("api_key", "authorization") else _replace_secrets(v, fn) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_replace_secrets(v, fn) for v in value]
    return value


def test_redaction_is_listed_and_hook_and_drop_are_configurable() -> None:
    """drop= replaces the default drops; a redact= hook (seeing path, key, value) adds to the default
    redactions unless Redact(defaults=False) turns them off; the record lists both."""
    req = {"model": "m", "ts": 1, "headers": {"Authorization": "Bearer x", "X-Trace": "t1"}, "when": 5}
    c = canonicalize(req, drop=["when"], redact=lambda path, key, value: key == "X-Trace")
    assert c.dropped == ("$.when",)
    assert c.redacted == ("$.headers.Authorization", "$.headers.X-Trace")
    assert orjson.loads(c.data) == {"model": "m", "ts": 1, "headers": {"Authorization": REDACTED, "X-Trace": REDACTED}}
    only = intentlog.Redact(hook=lambda path, key, value: key == "X-Trace", defaults=False)
    c = canonicalize(req, drop=["when"], redact=only)
    assert c.redacted == ("$.headers.X-Trace",)
    assert orjson.loads(c.data) == {
        "model": "m",
        "ts": 1,
        "headers": {"Authorization": "Bearer x", "X-Trace": REDACTED},
    }
    d = canonicalize(req)
    assert d.dropped == ("$.ts",)
    assert d.redacted == ("$.headers.Authorization",)
    assert orjson.loads(d.data) == {"model": "m", "headers": {"Authorization": REDACTED, "X-Trace": "t1"}, "when": 5}
    assert intentlog.request_hash(req) == d.digest


def test_surrogate_strings_are_refused() -> None:
    """request_hash refuses a string that is not valid UTF-8 (a lone surrogate) instead of mangling it."""
    with pytest.raises(NotSerializable, match="surrogates"):
        request_hash({"a": ["ok", "\ud800"]})


def test_surrogate_strings_are_refused_naming_their_path() -> None:
    """request_hash names the path of a string that is not valid UTF-8, like every other refusal."""
    with pytest.raises(NotSerializable) as info:
        request_hash({"a": ["ok", "\ud800"]})
    assert info.value.path == "$.a[1]"
