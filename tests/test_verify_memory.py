"""verify is streaming: its memory does not grow with the bytes it hashes.

A ledger with ~300 MiB of objects (and as many bytes of recorded workspace files, which
verify hashes too) is verified in a fresh interpreter whose peak RSS must stay under
200 MiB. The ledger is built by recording workspace files, which streams them into the
store, so the test process never holds an object in memory either.

On Linux a process's ``ru_maxrss`` starts at its parent's high-water mark (exec records
the old address space's peak), so a child of a large pytest process would report the
parent's figure. The verifier therefore runs as the grandchild of a small interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import intentlog

FILES = 10
FILE_MIB = 30
LIMIT_MIB = 200

CHILD = """
import json, resource, sys
from intentlog.projections.verify import verify_path
report = verify_path(sys.argv[1], workspace=sys.argv[2])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"ok": report.ok, "rss_kib": peak, "bytes": report.bytes_hashed, "artifacts": report.artifacts,
                  "render": report.render()}))
"""

SPAWN = """
import subprocess, sys
sys.exit(subprocess.run([sys.executable, "-c", *sys.argv[1:]]).returncode)
"""


def test_a_300_mib_store_verifies_in_bounded_memory(tmp_path: Path) -> None:
    """Peak RSS of a verify over 300 MiB of objects plus 300 MiB of workspace files stays under 200 MiB."""
    ledger = intentlog.open(tmp_path / "ev")
    task = ledger.task("big")
    chunk = os.urandom(1 << 20)
    for i in range(FILES):
        name = f"data-{i}.bin"
        with open(tmp_path / name, "wb") as f:
            f.write(i.to_bytes(4, "big"))  # a distinct digest per file
            for _ in range(FILE_MIB):
                f.write(chunk)
        task.record_artifact(name, producer="memory test")
    ledger.close()
    objects = sum(p.stat().st_size for p in (tmp_path / "ev" / "objects").rglob("*") if p.is_file())
    assert objects >= FILES * FILE_MIB << 20

    out = subprocess.run(
        [sys.executable, "-c", SPAWN, CHILD, str(tmp_path / "ev"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    result = json.loads(out)
    assert result["ok"], result["render"]
    assert result["artifacts"] == FILES
    assert result["bytes"] >= 2 * objects  # every object and every workspace file was hashed
    peak_mib = result["rss_kib"] / 1024
    print(f"verify peak RSS: {peak_mib:.1f} MiB for {result['bytes'] / (1 << 20):.0f} MiB hashed")
    assert peak_mib < LIMIT_MIB
