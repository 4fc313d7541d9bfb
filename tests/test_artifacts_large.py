"""The artifact store across processes and at scale: concurrent writers, bounded memory.

Each test runs the store in child processes (``sys.executable``) and then reads the result
back from disk in the parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from blake3 import blake3

from intentlog.artifacts import ArtifactStore

REPO = Path(__file__).resolve().parent.parent


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


RACER = textwrap.dedent(
    """
    import json, os, random, sys, time
    from intentlog.artifacts import ArtifactStore

    root, go, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = ArtifactStore(root)
    blobs = [random.Random(i).randbytes(5 << 20) for i in range(rounds)]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    digests = []
    for blob in blobs:
        ref = store.put(blob)
        digests.append(ref.digest)
        # and once more at once: the no-op path racing the other process's creation
        if store.put(blob) != ref:
            sys.exit("second put gave another ref")
    print(json.dumps(digests))
    """
)


def test_two_processes_put_same_bytes_at_once(tmp_path: Path) -> None:
    """Two processes putting the same 5 MiB blobs at the same moment both succeed, and each
    blob ends as exactly one read-only object holding the right bytes, with no debris."""
    import random

    root = tmp_path / "ledger"
    go = tmp_path / "go"
    rounds = 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(root), str(go), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:  # both imported and built their blobs: they start at the same moment
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate(timeout=120)[1]
    go.write_bytes(b"")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert results[0] == results[1]
    expected = [random.Random(i).randbytes(5 << 20) for i in range(rounds)]
    assert results[0] == ["blake3:" + blake3(b).hexdigest() for b in expected]

    store = ArtifactStore(root)
    assert sorted(store.iter_digests()) == sorted(results[0])
    files = sorted(p for p in (root / "objects").rglob("*") if p.is_file())
    assert len(files) == rounds
    for digest, blob in zip(results[0], expected, strict=True):
        path = store.path_for(digest)
        assert path.read_bytes() == blob
        assert path.stat().st_mode & 0o777 == 0o444
        assert store.verify(digest)
    assert list((root / "tmp").iterdir()) == []
    assert not (root / "quarantine").exists()


# Linux carries a process's peak RSS across exec, so a child exec'd from pytest would
# report pytest's own peak as its ru_maxrss. The measuring process is therefore a fork of
# the fresh interpreter: its high-water mark starts from that small image.
FRESH_PEAK = textwrap.dedent(
    """
    import os, sys, traceback
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """
)

BIG = FRESH_PEAK + textwrap.dedent(
    """
    try:
        import json, resource
        from intentlog.artifacts import ArtifactStore

        root, src = sys.argv[1], sys.argv[2]
        store = ArtifactStore(root)
        ref = store.put_file(src)
        assert store.verify(ref.digest)
        total = 0
        with store.open(ref.digest) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"digest": ref.digest, "size": ref.size, "read": total, "peak_kib": peak_kib}))
        sys.stdout.flush()
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)
    """
)

BASELINE = FRESH_PEAK + textwrap.dedent(
    """
    import json, resource
    import intentlog.artifacts
    print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    sys.stdout.flush()
    os._exit(0)
    """
)


def test_large_file_bounded_memory(tmp_path: Path) -> None:
    """put_file, verify and a streaming open() of a 300 MiB file stay far below its size in
    peak resident memory (measured in a child process), and the object hashes right."""
    size = 300 << 20
    src = tmp_path / "big.bin"
    hasher = blake3()
    block = os.urandom(1 << 20)
    with open(src, "wb") as f:
        for i in range(size >> 20):
            chunk = i.to_bytes(8, "little") + block[8:]
            hasher.update(chunk)
            f.write(chunk)
    expected = "blake3:" + hasher.hexdigest()

    root = tmp_path / "ledger"
    done = subprocess.run(
        [sys.executable, "-c", BIG, str(root), str(src)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    base = json.loads(
        subprocess.run(
            [sys.executable, "-c", BASELINE], capture_output=True, text=True, env=child_env(), check=True
        ).stdout
    )
    peak_mib = report["peak_kib"] / 1024
    growth_mib = (report["peak_kib"] - base["peak_kib"]) / 1024
    assert report == {"digest": expected, "size": size, "read": size, "peak_kib": report["peak_kib"]}
    assert peak_mib < 100, f"peak RSS {peak_mib:.0f} MiB for a 300 MiB artifact"
    assert growth_mib < 64, f"RSS grew {growth_mib:.0f} MiB over an idle import"

    path = ArtifactStore(root).path_for(expected)
    assert path.stat().st_size == size
    assert list((root / "tmp").iterdir()) == []
