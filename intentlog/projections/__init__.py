"""Pure folds over events: the work state, the replay checks. Projections never write."""

from .workstate import CallState, CompilationState, WorkState, WorkStateFold, work_state

__all__ = ["CallState", "CompilationState", "WorkState", "WorkStateFold", "work_state"]
