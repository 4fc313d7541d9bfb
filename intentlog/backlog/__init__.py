"""Durable backlogs: items that survive crashes, stalls, blocks and quotas (docs/backlog.md).

``ledger.backlog("nightly")`` gives a :class:`Backlog`; ``add`` items once, ``run`` them with
worker processes, ``view`` them, ``unblock`` an item a person has settled. An expired lease
never means "run it again": an item taken over resumes through the effect protocol.
"""

from __future__ import annotations

from .core import Backlog, BacklogView, PayloadChanged, StillBlocked
from .model import ITEM_STATES, ItemView
from .quota import Quota, parse_quota
from .worker import LeaseLost, QuotaExhausted, Stopping, units

__all__ = [
    "ITEM_STATES",
    "Backlog",
    "BacklogView",
    "ItemView",
    "LeaseLost",
    "PayloadChanged",
    "Quota",
    "QuotaExhausted",
    "StillBlocked",
    "Stopping",
    "parse_quota",
    "units",
]
