"""Listing ``objects/``: every object name, shard by shard, in bounded memory."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from .._internal.digest import DIGEST_PREFIX
from ..errors import ArtifactError

__all__ = ["list_objects"]

_SHARD_RE = re.compile(r"[0-9a-f]{2}\Z")
_NAME_RE = re.compile(r"[0-9a-f]{62}\Z")


def _strerror(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


def list_objects(objects: Path) -> Iterator[str]:
    """Every object digest under ``objects``, shard by shard in sorted order; stray names skipped.

    A shard folder that is a link is not listed (verify reports it); a listing the system
    refuses is an :class:`~intentlog.errors.ArtifactError` naming the folder.
    """
    try:
        shards = sorted(
            e.name
            for e in os.scandir(objects)
            if _SHARD_RE.match(e.name) and e.is_dir(follow_symlinks=False)  # a linked shard is verify's to report
        )
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ArtifactError(
            f"cannot list {objects}: {_strerror(exc)}; check the ledger folder's permissions"
        ) from exc
    for shard in shards:
        shard_dir = objects / shard
        try:
            names = sorted(
                e.name for e in os.scandir(shard_dir) if _NAME_RE.match(e.name) and e.is_file(follow_symlinks=False)
            )
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ArtifactError(
                f"cannot list {shard_dir}: {_strerror(exc)}; check the ledger folder's permissions"
            ) from exc
        for name in names:
            yield DIGEST_PREFIX + shard + name
