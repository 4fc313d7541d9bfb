"""The idioms of durable execution, written once on the stream core for both storages.

- :mod:`.values`: recorded values (``task.value``, ``task.avalue``, ``@task.step``);
- :mod:`.sleep`: durable sleep (``task.sleep_until``, ``task.sleep_for``);
- :mod:`.events`: external events (``task.wait_for_event``, ``ledger.signal``);
- :mod:`.children`: child tasks (``task.spawn``, ``task.join``).

Each records what it decided in the task's own stream (kinds in intentlog's ``task.``
namespace, folded by :mod:`intentlog.projections.idioms`), durable before it matters;
running the script again reads the record back instead of deciding again.
"""

from __future__ import annotations

from .errors import ChildrenPending, EventConflict, EventTimedOut, Suspended

__all__ = ["ChildrenPending", "EventConflict", "EventTimedOut", "Suspended"]
