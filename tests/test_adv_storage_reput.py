"""A put over an existing object of the right size but the wrong bytes stores the right bytes.

Before the fix the store trusted any regular file of the right size at the object's
name: a rotted or planted object made ``put`` return success without storing anything,
so the bytes just paid for (a provider's response) were lost, and every later read of
them failed. Now the existing object is hashed; a wrong one is moved to ``quarantine/``
and the bytes published in its place.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import intentlog


@pytest.mark.parametrize("size", [5000, 3 << 20])
def test_a_reput_replaces_a_same_size_corrupt_object(tmp_path: Path, size: int) -> None:
    led = intentlog.open(tmp_path / "l")
    data = os.urandom(size)
    ref = led.artifacts.put(data)
    path = led.artifacts.path_for(ref.digest)
    os.chmod(path, 0o644)
    path.write_bytes(bytes(b ^ 0xFF for b in data[:10]) + data[10:])
    os.chmod(path, 0o444)

    again = led.artifacts.put(data)
    assert again.digest == ref.digest
    assert path.read_bytes() == data, "put returned success but the object holds other bytes"
    assert led.artifacts.get(ref.digest) == data
    moved = list((tmp_path / "l" / "quarantine").iterdir())
    assert len(moved) == 1 and moved[0].read_bytes()[:10] != data[:10], "the corrupt object is kept aside"
    led.close()
