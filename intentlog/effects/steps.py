"""What the call state machine asks of its driver: the instructions, and the driver that runs them in this thread.

The protocol's decisions are written once, in :mod:`.call`, as generators (:data:`Steps`):
they append to the record themselves and *yield* an instruction whenever they need
something only a driver can do -- make what was appended durable (:data:`SYNC`), go past
the point of no return (:data:`PROCEED`, just before ``attempt.started``), send the
request (:class:`Deliver`), run the interpreter (:class:`Interpreting`), wait out a retry
delay (:class:`Pause`) or ask the provider about an unknown effect (:class:`Ask`). What
the instruction produced is sent back into the generator; what it raised is thrown into
it at the ``yield``, so the decision code handles a send's failure exactly where it asked
for the send.

:func:`drive` is the synchronous driver (``task.effect``, ``Call.run``): each instruction
runs in the calling thread, a ``SYNC`` is :meth:`TaskStream.sync`. The awaitable driver
(:mod:`.aio`) runs the same generators with an event loop: sends and interpreters are
awaited, and everything that touches the disk runs in the task's disk thread, where syncs
are shared (:mod:`.disk`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

from .long import send_with_heartbeat

if TYPE_CHECKING:
    from .._internal.types import Interpret, Lookup, Send
    from ..stream import TaskStream
    from .intent import Intent
    from .long import Long

T = TypeVar("T")


@final
@dataclass(frozen=True, slots=True)
class Sync:
    """Make every event appended so far durable before going on."""


#: The one :class:`Sync` instruction.
SYNC: Final = Sync()


@final
@dataclass(frozen=True, slots=True)
class Proceed:
    """The point of no return (``attempt.started`` comes next): a driver whose caller gave up stops here."""


#: The one :class:`Proceed` instruction.
PROCEED: Final = Proceed()


@final
@dataclass(frozen=True, slots=True)
class Deliver:
    """Send the request (its ``attempt.started`` is durable); the answer is the raw response, or what send raised."""

    key: str
    send: Send
    intent: Intent
    call_id: str
    attempt: int
    long: Long


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """What an interpreter did: its value, or the exception it raised (recorded, never re-raised)."""

    value: Any = None
    error: Exception | None = None


@final
@dataclass(frozen=True, slots=True)
class Interpreting:
    """Run the interpreter over durable response bytes; the answer is an :class:`Outcome`."""

    interpret: Interpret
    raw: bytes


@final
@dataclass(frozen=True, slots=True)
class Pause:
    """Wait out a retry delay (its ``attempt.retry_decided`` is durable) with the policy's ``sleep``."""

    seconds: float
    sleep: Callable[[float], Any]


@final
@dataclass(frozen=True, slots=True)
class Ask:
    """Ask ``lookup`` about an unknown effect; the answer is what it returned."""

    lookup: Lookup
    key: str
    call_id: str
    attempt: int


Instruction = Sync | Proceed | Deliver | Interpreting | Pause | Ask

#: A piece of the protocol's decisions: yields instructions, receives their answers, returns a T.
Steps = Generator[Instruction, Any, T]


def interpret_now(ins: Interpreting) -> Outcome:
    """Run a synchronous interpreter: its failure is an outcome to record, not an error to raise."""
    try:
        return Outcome(ins.interpret(ins.raw))
    except Exception as exc:  # the interpreter is user code: its failure is recorded
        return Outcome(error=exc)


def execute(task: TaskStream, ins: Instruction) -> Any:
    """Carry out one instruction in this thread (the synchronous driver's half of the protocol)."""
    if isinstance(ins, Sync):
        task.sync()
        return None
    if isinstance(ins, Proceed):  # a synchronous caller cannot give up in between
        return None
    if isinstance(ins, Deliver):
        return send_with_heartbeat(task, ins.key, ins.send, ins.intent, ins.call_id, ins.attempt, ins.long)
    if isinstance(ins, Interpreting):
        return interpret_now(ins)
    if isinstance(ins, Pause):
        ins.sleep(ins.seconds)
        return None
    return ins.lookup(ins.key, ins.call_id, ins.attempt)


def drive(task: TaskStream, steps: Steps[T]) -> T:
    """Run ``steps`` to its end in this thread: every instruction is carried out here, in order."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            ins = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            answer = execute(task, ins)
        except BaseException as exc:  # thrown into the decision code at its yield, which decides
            error = exc
