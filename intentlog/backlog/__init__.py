"""Durable backlogs: items that survive crashes, stalls, blocks and quotas (docs/backlog.md).

``ledger.backlog("nightly")`` gives a :class:`Backlog`; ``add`` items once, ``run`` them,
``view`` them, ``unblock`` an item a person has settled. ``engine=`` picks where the items
run: forked processes (``"local"``) or Dask (``"dask"``, :class:`DaskEngine`; the ``dask``
extra, imported only when used). An expired lease never means "run it again": an item
taken over resumes through the effect protocol.
"""

from __future__ import annotations

from ..errors import LeaseLost
from .core import Backlog, BacklogTaken, BacklogView, ItemTaskTaken, PayloadChanged, StillBlocked
from .dask_engine import DaskEngine
from .engines import Engine, LocalEngine
from .errors import MalformedRecord
from .model import ITEM_STATES, ItemView
from .quota import Quota, parse_quota
from .runlease import BacklogBusy
from .supervisor import BacklogTakenOver, WorkersDie
from .worker import QuotaExhausted, Stopping, units

__all__ = [
    "ITEM_STATES",
    "Backlog",
    "BacklogBusy",
    "BacklogTaken",
    "BacklogTakenOver",
    "BacklogView",
    "DaskEngine",
    "Engine",
    "ItemTaskTaken",
    "ItemView",
    "LeaseLost",
    "LocalEngine",
    "MalformedRecord",
    "PayloadChanged",
    "Quota",
    "QuotaExhausted",
    "StillBlocked",
    "Stopping",
    "WorkersDie",
    "parse_quota",
    "units",
]
