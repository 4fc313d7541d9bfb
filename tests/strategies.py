"""Shared hypothesis strategies and small on-disk helpers for the stream tests.

Everything here builds values a test feeds to intentlog, or reads what intentlog left on
disk without going through intentlog (so the check is independent of the code it checks).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import orjson
from blake3 import blake3
from hypothesis import strategies as st

from intentlog.eventlog.canonical import DEFAULT_DROP, DEFAULT_REDACT
from intentlog.eventlog.format import RESERVED_PREFIXES
from intentlog.eventlog.redaction import is_credential_name

# -- names ---------------------------------------------------------------------------

DROP_NAMES = ("ts", "timestamp", "created_at", "updated_at")
REDACT_NAMES = ("api_key", "authorization")
# every key the default canonicalisation drops or redacts (compared lowercased): taken from
# the library so generated "plain" keys stay plain when the defaults grow
_SPECIAL = DEFAULT_DROP | DEFAULT_REDACT

TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")
DIGEST_RE = re.compile(r"blake3:[0-9a-f]{64}\Z")

task_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
bad_task_ids = st.sampled_from(["", "..", ".", "a/b", "x" * 129, "\x00", "a\x00b", ".hidden", "-x", "_x", "a b", "é"])

user_kinds = st.from_regex(r"[a-z][a-z0-9_]{0,7}(\.[a-z][a-z0-9_]{0,7}){0,2}", fullmatch=True).filter(
    lambda k: not k.startswith(RESERVED_PREFIXES)
)

# -- JSON values -----------------------------------------------------------------------

# Plain keys: never dropped or redacted by the default canonicalisation.
plain_keys = st.text(max_size=8).filter(lambda k: k.lower() not in _SPECIAL and not is_credential_name(k))

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)


def json_values(keys: st.SearchStrategy[str] = plain_keys, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Exact JSON values (lists, never tuples; string keys; finite floats; 64-bit ints)."""
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=max_leaves,
    )


def json_objects(keys: st.SearchStrategy[str] = plain_keys, max_leaves: int = 12) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(keys, json_values(keys, max_leaves), max_size=5)


event_data = json_objects(max_leaves=8)


@dataclasses.dataclass
class Point:
    x: int


# (bad value, words the error message must contain)
BAD_VALUES: list[tuple[Any, str]] = [
    (float("nan"), "finite"),
    (float("inf"), "finite"),
    (float("-inf"), "finite"),
    ({1, 2}, "set"),
    (frozenset({1}), "frozenset"),
    (b"bytes", "bytes"),
    (bytearray(b"x"), "bytearray"),
    (datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), "datetime"),
    (datetime.date(2026, 1, 1), "date"),
    (Point(1), "Point"),
    (2**64, "64 bits"),
    (-(2**63) - 1, "64 bits"),
    (object(), "object"),
]
bad_values = st.sampled_from(BAD_VALUES)


@st.composite
def with_value_at(draw: st.DrawFn, value: Any) -> tuple[dict[str, Any], str]:
    """A JSON object with ``value`` planted at any depth (inside dicts and lists); returns (object, its JSON path)."""
    root: dict[str, Any] = draw(json_objects(max_leaves=4))
    node: Any = root
    path = "$"
    for _ in range(draw(st.integers(0, 3))):
        child: Any = {} if draw(st.booleans()) else draw(st.lists(json_values(max_leaves=2), max_size=2))
        if isinstance(node, dict):
            key = draw(plain_keys)
            node[key] = child
            path += f".{key}"
        else:
            node.append(child)
            path += f"[{len(node) - 1}]"
        node = child
    if isinstance(node, dict):
        key = draw(plain_keys)
        node[key] = value
        path += f".{key}"
    else:
        node.append(value)
        path += f"[{len(node) - 1}]"
    return root, path


@st.composite
def with_extra_keys(
    draw: st.DrawFn, names: tuple[str, ...], values: st.SearchStrategy[Any]
) -> tuple[Any, Any, list[str]]:
    """A JSON value and a copy of it with keys from ``names`` added in dicts at any depth.

    Returns (original, augmented, JSON paths of the added keys).
    """
    original = draw(json_values(max_leaves=10))
    added: list[str] = []

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, dict):
            out = {k: walk(x, f"{path}.{k}") for k, x in v.items()}
            for name in draw(st.lists(st.sampled_from(names), max_size=2, unique=True)):
                out[name] = draw(values)
                added.append(f"{path}.{name}")
            return out
        if isinstance(v, list):
            return [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
        return v

    if not isinstance(original, dict):
        original = {"root": original}
    augmented = walk(original, "$")
    if not added:
        name = draw(st.sampled_from(names))
        augmented[name] = draw(values)
        added.append(f"$.{name}")
    return original, augmented, added


def reorder(value: Any, rnd: Any) -> Any:
    """The same value with every dict's keys in a shuffled insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: reorder(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [reorder(v, rnd) for v in value]
    return value


# -- torn tails ------------------------------------------------------------------------


@st.composite
def crash_tails(draw: st.DrawFn, last_line: bytes) -> bytes:
    """Bytes a crash (or power loss) can leave after the last good line.

    An incomplete line, random garbage (maybe with newlines) or zeros. A replayed whole
    line that parses but does not chain (the "suspect" case) is not among them: a crash
    cannot leave one, and writers refuse it as damage.
    """
    choice = draw(st.sampled_from(["half", "garbage", "zeros"]))
    if choice == "half":
        cut = draw(st.integers(1, len(last_line) - 1))
        return last_line[:cut]
    if choice == "garbage":
        return draw(st.binary(min_size=1, max_size=64))
    if choice == "zeros":
        return b"\x00" * draw(st.integers(1, 4096))
    raise AssertionError(choice)  # pragma: no cover


# -- reading the disk without intentlog -------------------------------------------------


def b3(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def raw_lines(path: str | os.PathLike[str]) -> list[bytes]:
    """The file's lines with their ``\\n`` (the last may lack it)."""
    data = Path(path).read_bytes()
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def check_chain(path: str | os.PathLike[str], *, torn_ok: bool = False) -> list[dict[str, Any]]:
    """Verify a stream file independently of intentlog; return the parsed events.

    Every line is ``\\n``-terminated compact sorted JSON with exactly data/kind/prev/seq/ts,
    seq counts from 0, prev is the BLAKE3 of the previous line's exact bytes. With
    ``torn_ok`` an incomplete last line (a torn append) is allowed and ignored.
    """
    events = []
    prev = None
    lines = raw_lines(path)
    if torn_ok and lines and not lines[-1].endswith(b"\n"):
        lines.pop()
    for i, line in enumerate(lines):
        assert line.endswith(b"\n"), f"line {i + 1} is not newline-terminated: {line[-40:]!r}"
        obj = orjson.loads(line)
        assert list(obj) == ["data", "kind", "prev", "seq", "ts"], f"line {i + 1} keys {list(obj)}"
        assert orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n" == line, f"line {i + 1} is not canonical"
        assert obj["seq"] == i, f"line {i + 1} has seq {obj['seq']}"
        assert obj["prev"] == prev, f"line {i + 1} does not chain"
        assert TS_RE.match(obj["ts"]), obj["ts"]
        prev = b3(line)
        events.append(obj)
    return events


def snapshot_tree(root: str | os.PathLike[str]) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``root``: kind, size and sha256 of its bytes (files) — to prove nothing was written."""
    root = Path(root)
    out: dict[str, tuple[str, int, str]] = {}
    if not root.exists():
        return out
    if root.is_file():
        data = root.read_bytes()
        return {".": ("file", len(data), hashlib.sha256(data).hexdigest())}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = ("dir", 0, "")
        for f in filenames:
            p = os.path.join(dirpath, f)
            data = Path(p).read_bytes()
            out[os.path.relpath(p, root)] = ("file", len(data), hashlib.sha256(data).hexdigest())
    return out
