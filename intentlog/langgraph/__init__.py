"""LangGraph on an intentlog ledger (the ``langgraph`` extra: ``pip install 'intentlog[langgraph]'``).

* :class:`IntentlogSaver`: a checkpointer (``BaseCheckpointSaver``, sync and async) that
  keeps each thread's checkpoints and pending writes as one intentlog task: fsync'd,
  hash-chained, verifiable offline with ``intentlog verify``, on a folder or ``s3://``.
* :func:`intentlog_tool`: a tool whose side effect runs at most once. Its call is an
  effect of the thread's task keyed by the LangGraph task that runs it; a graph resumed
  after a crash replays a completed call from the record and refuses
  (:class:`~intentlog.EffectUnknown`, naming the ``intentlog reconcile`` command) a call
  that started and left nothing.
* :func:`node_run`: the thread's task and the running node's key, for other effects made
  in a node (a model call through ``intentlog.http``), once the checkpoint the node runs
  from is recorded.

The core never imports this package (docs/langgraph.md).
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"intentlog.langgraph needs the 'langgraph' extra: pip install 'intentlog[langgraph]' ({exc})"
    ) from exc

from .saver import DEFAULT_PREFIX, IntentlogSaver
from .tools import intentlog_tool, node_run

__all__ = ["DEFAULT_PREFIX", "IntentlogSaver", "intentlog_tool", "node_run"]
