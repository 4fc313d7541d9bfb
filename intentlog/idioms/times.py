"""The times an idiom records (a sleep's wake time, a wait's deadline): checked to be ones a record can hold."""

from __future__ import annotations

import datetime as _dt
import math

from ..errors import UsageError
from ..eventlog.format import TS_FORMAT

__all__ = ["recorded_ts"]

#: the record's timestamps have four-digit years: 1000-01-01 .. 9999-12-31 (UTC)
_FIRST = _dt.datetime(1000, 1, 1, tzinfo=_dt.timezone.utc).timestamp()
_LAST = _dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.timezone.utc).timestamp()


def recorded_ts(epoch: float, what: str) -> str:
    """``epoch`` as the record writes it, or :class:`UsageError` (nothing written) when no record could hold it.

    A time before the year 1000 or after 9999 would be written in a form that no later run
    could read back, so every re-run of the task would fail on its own record.
    """
    if not (math.isfinite(epoch) and _FIRST <= epoch <= _LAST):
        raise UsageError(
            f"{what} falls outside the years 1000-9999 that a record's time can hold; nothing was written: "
            "give a nearer time"
        )
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).strftime(TS_FORMAT)
