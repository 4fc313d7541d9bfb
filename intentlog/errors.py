"""The one exception tree of intentlog.

Every error the library raises on purpose derives from :class:`IntentlogError`.
Misuse errors also derive from :class:`ValueError` or :class:`TypeError` so that
generic handlers keep working. Messages say what went wrong, where, and what next;
the fields behind the message are attributes so scripts need not parse text.

::

    IntentlogError
    ├── InvalidTaskId (ValueError)
    ├── NotSerializable (TypeError)
    ├── LedgerError
    │   ├── NotALedger (ValueError)
    │   └── LinkRefused
    ├── CorruptStream
    ├── StreamPoisoned
    ├── TaskBusy
    ├── LeaseLost
    ├── StoreRefused
    ├── MergeRefused
    ├── Conflict
    ├── GcRefused
    ├── ReservedKind (ValueError)
    ├── UsageError (ValueError)
    │   └── WrongType (TypeError)
    ├── ArtifactError
    │   ├── InvalidDigest (ValueError)
    │   ├── ArtifactMissing
    │   ├── DigestMismatch
    │   └── OutsideWorkspace (ValueError)
    ├── UnknownCall (KeyError)
    ├── UnknownApproval (KeyError)
    ├── ApprovalConflict
    ├── ApprovalPending
    ├── RetryHandedBack
    ├── ResumeRefused
    │   ├── EffectUnknown
    │   ├── ApprovalRejected
    │   └── ApprovalVoid
    ├── PreparationFailed
    │   └── RequiredContextMissing
    ├── CallFailed
    ├── ReinterpretFailed
    ├── NotSent          (raised by a ``send`` function: the request never left)
    └── ProviderFailure  (raised by a ``send`` function: the provider answered with an error)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "ApprovalConflict",
    "ApprovalPending",
    "ApprovalRejected",
    "ApprovalVoid",
    "ArtifactError",
    "ArtifactMissing",
    "CallFailed",
    "Conflict",
    "CorruptStream",
    "DigestMismatch",
    "EffectUnknown",
    "GcRefused",
    "IntentlogError",
    "InvalidDigest",
    "InvalidTaskId",
    "KeyReused",
    "LeaseLost",
    "LedgerError",
    "LinkRefused",
    "MergeRefused",
    "NotALedger",
    "NotSent",
    "NotSerializable",
    "OutsideWorkspace",
    "PreparationFailed",
    "ProviderFailure",
    "RequiredContextMissing",
    "ReinterpretFailed",
    "ReservedKind",
    "ResumeRefused",
    "RetryHandedBack",
    "StoreRefused",
    "StreamPoisoned",
    "TaskBusy",
    "UnknownApproval",
    "UnknownCall",
    "UsageError",
    "WrongType",
]


class IntentlogError(Exception):
    """Base of every error intentlog raises on purpose."""


class InvalidTaskId(IntentlogError, ValueError):
    """A task id does not match ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``; nothing was written."""

    def __init__(self, task_id: object) -> None:
        self.task_id = task_id
        super().__init__(
            f"invalid task id {task_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )


class NotSerializable(IntentlogError, TypeError):
    """A value cannot be recorded as JSON exactly; nothing was written."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        self.path = path
        super().__init__(f"not serializable at {path}: {message}")


class LedgerError(IntentlogError):
    """The ledger folder cannot be used as it is."""


class NotALedger(LedgerError, ValueError):
    """The root path is not a usable ledger folder; nothing was written."""

    def __init__(self, root: str, reason: str) -> None:
        self.root = root
        self.reason = reason
        super().__init__(f"{root}: {reason}")


class LinkRefused(LedgerError):
    """A path inside the ledger is a symbolic link; nothing was read or written through it.

    intentlog never follows a link inside a ledger (streams, lock files, objects, shard
    folders, ``tmp/``, ``quarantine/``): a link could lead its writes outside the folder.
    """

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        super().__init__(
            f"{path}: is a symbolic link where intentlog keeps {what}; links inside a ledger are never "
            "followed, so nothing was read or written through it: move the link aside, put back "
            "the real file or folder it stands for (from a copy or git), and try again"
        )


class CorruptStream(IntentlogError):
    """A stream holds a line that fails its checks and cannot be repaired automatically."""

    def __init__(self, path: str, line: int, reason: str, *, hint: str | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        tail = hint or "run 'intentlog verify' and restore the file from a copy or git"
        super().__init__(f"{path} line {line}: {reason}; {tail}")


class StreamPoisoned(IntentlogError):
    """A write or sync failed earlier; the handle refuses appends until the task is reopened."""

    def __init__(self, path: str, cause: str) -> None:
        self.path = path
        self.cause = cause
        super().__init__(
            f"{path}: an earlier write or sync failed ({cause}); its durability is unknown, "
            "so this handle refuses to append: close the task and open it again to re-check the tail"
        )


class TaskBusy(IntentlogError):
    """Another writer holds the task's lock (a folder) or lease (an object store).

    Attributes: ``holder_pid`` and ``holder_host`` (the holder's process and host, None
    where not known), and for a lease that can be taken over: ``still_for`` (seconds its
    stream was seen standing still, on this process's clock), ``take_over_after`` (after
    how long standing still it is taken, None: never without being asked) and ``alive``
    (True/False when this machine can tell, else None).
    """

    def __init__(
        self,
        task_id: str,
        path: str,
        holder_pid: int | None,
        *,
        holder_host: str | None = None,
        still_for: float | None = None,
        take_over_after: float | None = None,
        alive: bool | None = None,
    ) -> None:
        self.task_id = task_id
        self.path = path
        self.holder_pid = holder_pid
        self.holder_host = holder_host
        self.still_for = still_for
        self.take_over_after = take_over_after
        self.alive = alive
        who = f"process {holder_pid}" if holder_pid else "another process"
        if holder_host:
            who += f" on {holder_host}"
        if still_for is None:
            super().__init__(
                f"task {task_id!r} is being written by {who} (lock {path}); wait for it to finish or pass a longer wait"
            )
            return
        if alive:
            state = "it is alive (seen from this machine)"
        elif alive is False:
            state = f"its process has ended; its stream has stood still for {still_for:.0f} s as watched from here"
        elif still_for > 0 or take_over_after is None:
            state = f"its stream has stood still for {still_for:.0f} s as watched from here"
        else:
            state = "its stream moved while watched from here: its holder is alive"
        if take_over_after is None:
            when = "it is not taken over unless asked"
        elif alive:
            when = "it is taken over once that process ends"
        else:
            left = max(0.0, take_over_after - still_for)
            when = f"it is taken over once its stream stands still {take_over_after:g} s (about {left:.0f} s more)"
        super().__init__(
            f"task {task_id!r} is being written by {who} (lease {path}); {state}; {when}. To take it now "
            "(the holder is fenced: its next append fails with LeaseLost, nothing more written by it): pass "
            "--take-over-after 0 on the command line, take_over_after=0 in the API; or wait for it to finish"
        )


class LeaseLost(IntentlogError):
    """This writer no longer holds the stream's lease: it is fenced and appends (and sends) nothing more.

    One type for every way a lease is lost: another writer took a store stream's lease
    (``where`` is the segment that refused the put), or a folder task's writer lock is no
    longer this process's (``where`` is the lock file; ``why`` says what was found).
    """

    def __init__(self, task_id: str, where: str, epoch: int, *, why: str | None = None) -> None:
        self.task_id = task_id
        self.where = where
        self.epoch = epoch
        self.why = why
        if why is None:
            super().__init__(
                f"task {task_id!r}: the writer lease (epoch {epoch}) was taken by another writer at {where}; "
                "nothing more was appended through it: open the task again to see what the stream holds"
            )
        else:
            super().__init__(
                f"task {task_id!r}: the writer lease (epoch {epoch}) {why} ({where}); "
                "nothing is written or sent: open the task again to see what the stream holds"
            )


class StoreRefused(IntentlogError):
    """A store failed the conformance probe: it cannot fence writers, so nothing is written to it."""

    def __init__(self, root: str, failures: Sequence[str]) -> None:
        self.root = root
        self.failures = tuple(failures)
        super().__init__(
            f"{root}: refused, the store cannot keep one writer per stream ({'; '.join(self.failures)}); "
            "use a store whose conditional PUT (If-None-Match: *) is atomic, and check it with 'intentlog doctor'"
        )


class MergeRefused(IntentlogError):
    """Tasks diverged between two ledgers (the same id, different lines at one seq): nothing was merged."""

    def __init__(self, src: str, dst: str, diverged: Sequence[tuple[str, int]]) -> None:
        self.src = src
        self.dst = dst
        self.diverged = tuple(diverged)
        named = ", ".join(f"{t!r} at seq {seq}" for t, seq in self.diverged)
        super().__init__(
            f"merging {src} into {dst} refused: {len(self.diverged)} task(s) diverged ({named}); "
            f"nothing was written to {dst}: each task must have had one writer (fork one side's task "
            "under a new id, then merge again)"
        )


class Conflict(IntentlogError):
    """An append carried ``expected_seq`` and the stream had moved on."""

    def __init__(self, task_id: str, expected_seq: int, actual_seq: int) -> None:
        self.task_id = task_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"task {task_id!r}: expected the next seq to be {expected_seq} but it is {actual_seq}; "
            "re-read the task and decide again"
        )


class ArtifactError(IntentlogError):
    """Base for artifact store errors."""


class InvalidDigest(ArtifactError, ValueError):
    """A digest is not ``blake3:`` followed by 64 lowercase hex digits."""

    def __init__(self, digest: object) -> None:
        self.digest = digest
        super().__init__(f"invalid digest {digest!r}: expected 'blake3:' and 64 lowercase hex digits")


class ArtifactMissing(ArtifactError):
    """No object with that digest is in the store."""

    def __init__(self, digest: str, where: str | None = None) -> None:
        self.digest = digest
        self.where = where
        at = f" (referenced by {where})" if where else ""
        super().__init__(f"artifact {digest} is not in the store{at}")


class DigestMismatch(ArtifactError):
    """Stored bytes no longer hash to their name."""

    def __init__(self, digest: str, actual: str, path: str) -> None:
        self.digest = digest
        self.actual = actual
        self.path = path
        super().__init__(
            f"{path}: named {digest} but its bytes hash to {actual}; the object is corrupt: restore it from a copy"
        )


class OutsideWorkspace(ArtifactError, ValueError):
    """A locator escapes the workspace root; nothing was written."""

    def __init__(self, locator: str, workspace: str) -> None:
        self.locator = locator
        self.workspace = workspace
        super().__init__(f"locator {locator!r} is outside the workspace {workspace}")


class UnknownCall(IntentlogError, KeyError):
    """No call with that id exists in the task."""

    def __init__(self, task_id: str, call_id: str) -> None:
        self.task_id = task_id
        self.call_id = call_id
        super().__init__(f"task {task_id!r} has no call {call_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownApproval(IntentlogError, KeyError):
    """No approval with that id was requested in the task; nothing was written."""

    def __init__(self, task_id: str, approval_id: str) -> None:
        self.task_id = task_id
        self.approval_id = approval_id
        super().__init__(
            f"task {task_id!r} has no approval {approval_id!r}: the script requests it with "
            f"task.request_approval({approval_id!r}, ...); see 'intentlog status {task_id}'"
        )

    def __str__(self) -> str:
        return str(self.args[0])


class ApprovalConflict(IntentlogError):
    """A decision cannot be recorded or used as asked (already decided, or the request changed); nothing was written."""

    def __init__(self, task_id: str, approval_id: str, reason: str, *, next_step: str) -> None:
        self.task_id = task_id
        self.approval_id = approval_id
        self.reason = reason
        self.next_step = next_step
        super().__init__(f"approval {approval_id!r} of task {task_id!r}: {reason}; {next_step}")


class ApprovalPending(IntentlogError):
    """No decision is recorded for the approval's current request.

    ``commands``: the complete ``approve`` and ``reject`` command lines for this ledger.

    Raised by ``wait_for_approval`` after its timeout (``waited``: seconds), and by the effect
    protocol (``waited`` None) when a call the approval binds would start an attempt.
    Running the script again waits again.
    """

    def __init__(
        self, task_id: str, approval_id: str, waited: float | None, *, commands: Sequence[str] = ()
    ) -> None:
        self.task_id = task_id
        self.approval_id = approval_id
        self.waited = waited
        #: the complete decisions, as ``intentlog status`` offers them (``--root`` included where needed)
        self.commands = tuple(commands)
        when = "not decided yet, so the call it binds does not start" if waited is None else (
            f"still undecided after {waited:.1f} s"
        )
        full = f" (in full: {', or '.join(self.commands)})" if self.commands else ""
        super().__init__(
            f"approval {approval_id!r} of task {task_id!r} is {when}; record a "
            f"decision with 'intentlog approve {task_id} {approval_id}' (or reject){full}, then run the script again"
        )


class RetryHandedBack(IntentlogError):
    """A retry was decided and recorded (``attempt.retry_decided``, delay null); the caller makes the next attempt.

    Raised by :meth:`Call.run` under ``RetryPolicy(hand_back=True)``: the decision is durable
    before this is raised, so running the call again starts the next attempt.
    """

    def __init__(self, call_id: str, key: str, attempt: int, reason: str) -> None:
        self.call_id = call_id
        self.key = key
        self.attempt = attempt
        self.reason = reason
        super().__init__(
            f"{call_id} (key {key!r}): attempt {attempt} failed ({reason}) and a retry was recorded; "
            "the next attempt is the caller's: run the call again when ready"
        )


class ResumeRefused(IntentlogError):
    """The record does not prove that continuing is safe; nothing was appended.

    ``commands``: the complete command lines that record the operator's decision, the very
    ones ``intentlog status`` offers (``--root`` included when the ledger is not the one
    the command line opens by default); a word in capitals, such as ``RESPONSE_FILE``, is
    the only part to fill in. Empty when the next operation is not a command.
    """

    def __init__(
        self,
        *,
        call_id: str,
        key: str,
        reason: str,
        next_operation: str,
        detail: str = "",
        commands: Sequence[str] = (),
    ) -> None:
        self.call_id = call_id
        self.key = key
        self.reason = reason
        self.next_operation = next_operation
        self.detail = detail
        self.commands = tuple(commands)
        extra = f": {detail}" if detail else ""
        run = f"; record it with: {', or '.join(self.commands)}" if self.commands else ""
        super().__init__(
            f"resume refused for {call_id} (key {key!r}): {reason}{extra}; next operation: {next_operation}{run}"
        )


class EffectUnknown(ResumeRefused):
    """An attempt started and nothing after it was recorded: the effect may have happened.

    ``commands`` holds the decisions, complete: ``intentlog [--root ROOT] reconcile TASK CALL
    --not-served`` (runs as pasted) and ``... --served --evidence RESPONSE_FILE``; a script
    records the same with ``task.reconcile(call_id, "served" | "not_served" | "resend")``.
    """


class ApprovalRejected(ResumeRefused):
    """The approval bound to the call was rejected for its current request: no attempt starts, nothing is sent.

    ``approval_id``, ``decision``, ``by`` and ``note`` say who refused and why.
    """

    def __init__(
        self, *, call_id: str, key: str, approval_id: str, decision: str, by: str | None, note: str | None
    ) -> None:
        self.approval_id = approval_id
        self.decision = decision
        self.by = by
        self.note = note
        why = f" ({note})" if note else ""
        super().__init__(
            call_id=call_id,
            key=key,
            reason=f"approval {approval_id!r} was rejected by {by or 'someone'}{why}",
            next_operation="operator decides",
            detail="a rejected request is never sent; change the request (a new key) and request approval again, "
            "or fail the call",
        )


class ApprovalVoid(ResumeRefused):
    """The approval bound to the call decided on another request hash than the call's current one."""

    def __init__(
        self, *, call_id: str, key: str, approval_id: str, binding: str | None, request_hash: str, why: str
    ) -> None:
        self.approval_id = approval_id
        self.binding = binding
        self.request_hash = request_hash
        super().__init__(
            call_id=call_id,
            key=key,
            reason=f"approval {approval_id!r} is void for this request: {why}",
            next_operation="request approval",
            detail=f"the call's request hashes to {request_hash}; request the approval again for it "
            "(task.request_approval) and have it decided before the call runs",
        )


class PreparationFailed(IntentlogError):
    """A call's request could not be built or recorded; ``call.preparation_failed`` was appended."""

    def __init__(self, call_id: str, key: str, error: str) -> None:
        self.call_id = call_id
        self.key = key
        self.error = error
        super().__init__(f"preparing {call_id} (key {key!r}) failed: {error}; fix the inputs and run again")


class RequiredContextMissing(PreparationFailed):
    """A compilation lacked required context items; ``context.compilation_failed`` was appended."""

    def __init__(self, compilation_id: str, missing: Sequence[str]) -> None:
        self.compilation_id = compilation_id
        self.missing = list(missing)
        IntentlogError.__init__(
            self,
            f"compilation {compilation_id!r} is missing required context {', '.join(self.missing)}; "
            "offer them and compile again",
        )
        self.call_id = compilation_id
        self.key = compilation_id
        self.error = "RequiredContextMissing"


class CallFailed(IntentlogError):
    """A call ended failed (retries exhausted, interpretation refused); an operator decides."""

    def __init__(self, call_id: str, key: str, reason: str) -> None:
        self.call_id = call_id
        self.key = key
        self.reason = reason
        super().__init__(f"{call_id} (key {key!r}) failed: {reason}; an operator decides what next")


class ReinterpretFailed(IntentlogError):
    """``task.reinterpret``: the new interpreter failed on the stored bytes; its failure is recorded, the earlier
    interpretation and result stand."""

    def __init__(self, call_id: str, key: str, reinterpretation: int, error: str) -> None:
        self.call_id = call_id
        self.key = key
        self.reinterpretation = reinterpretation
        self.error = error
        super().__init__(
            f"reinterpretation {reinterpretation} of {call_id} (key {key!r}) failed: {error}; it is recorded "
            "beside the earlier interpretation, whose result stands; fix the interpreter and try again"
        )


class NotSent(IntentlogError):
    """Raised by a ``send`` function when the request provably never left (safe to retry)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ProviderFailure(IntentlogError):
    """Raised by a ``send`` function when the provider answered with a failure.

    The provider answered, so the call's effect is known: a refusal, nothing served. It is
    recorded (``attempt.observed`` with the error and ``retryable``), then retried under the
    call's :class:`~intentlog.RetryPolicy` when ``retryable``, else the call fails. For an
    HTTP error status, :meth:`from_status` builds it with the retry rule the SDKs use.
    """

    @staticmethod
    def retry_wanted(status: int, headers: _Headers = None) -> bool:
        """Whether an HTTP answer with ``status`` is worth another try: 408, 409, 429 and 5xx.

        An ``x-should-retry: true`` or ``false`` header overrides the status, as the OpenAI
        and Anthropic SDKs read it. ``headers``: a mapping (``response.headers`` of httpx or
        requests) or ``(name, value)`` pairs of ``str`` or ``bytes``.
        """
        if status < 400:
            return False
        pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
        for name, value in pairs:
            if _text(name).lower() == "x-should-retry":
                said = _text(value).strip().lower()
                if said in ("true", "false"):
                    return said == "true"
        return status in (408, 409, 429) or status >= 500

    @staticmethod
    def from_status(
        status: int, reason: str = "", *, body: bytes | str | None = b"", headers: _Headers = None
    ) -> ProviderFailure:
        """The failure a ``send`` raises for an HTTP error answer: the provider refused, nothing was served.

        ``retryable`` follows :meth:`retry_wanted` (a 429 or a 503 is tried again under the
        call's retry policy; a 400 or a 401 fails the call). ``body`` is recorded as the
        attempt's observation. A status below 400 is not a refusal: :class:`UsageError`.

        ::

            response = client.post(url, json=request)
            if response.status_code >= 400:
                raise intentlog.ProviderFailure.from_status(
                    response.status_code, response.reason_phrase, body=response.content, headers=response.headers
                )
            return response.content
        """
        if isinstance(status, bool) or not isinstance(status, int) or status < 400:
            raise UsageError(f"HTTP status {status!r} is not a refusal: only a status of 400 or more is one")
        retryable = ProviderFailure.retry_wanted(status, headers)
        return ProviderFailure(f"HTTP {status} {reason}".strip(), body=body, retryable=retryable)

    def __init__(self, reason: str, *, body: bytes | str | None = b"", retryable: bool = False) -> None:
        self.reason = reason
        # the body is recorded as the attempt's observation: a str is kept as UTF-8, None as no bytes
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        self.body = bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else b""
        self.retryable = retryable
        super().__init__(reason)


#: HTTP headers as a send has them: a mapping, or ``(name, value)`` pairs of ``str`` or ``bytes``.
_Headers = Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]] | None


def _text(v: str | bytes) -> str:
    return v.decode("latin-1") if isinstance(v, bytes) else v


class KeyReused(ProviderFailure):
    """Raised by a ``send`` when the provider refused the idempotency key as reused with other parameters.

    (Stripe: HTTP 400 naming the key.) The provider recorded *another* request under this
    key, so the record and the provider disagree about what the key means: the call is
    failed as drift (``call.failed`` with a reason starting ``DRIFT``), never retried and
    never a new effect. Use a new key for this request.
    """

    def __init__(self, reason: str, *, body: bytes | str | None = b"") -> None:
        super().__init__(reason, body=body, retryable=False)


class ReservedKind(IntentlogError, ValueError):
    """A script tried to append an event kind that only intentlog itself writes."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(
            f"event kind {kind!r} is reserved for intentlog's own records "
            "(task., stream., call., attempt., effect., context., artifact., session., approval.); "
            "use the matching Task method, or another kind name"
        )


class UsageError(IntentlogError, ValueError):
    """An argument is not one the call accepts; nothing was written."""


class WrongType(UsageError, TypeError):
    """An argument has the wrong type (say, text where bytes are needed); nothing was written."""


class GcRefused(IntentlogError):
    """Garbage collection refused to run or to carry out a plan; nothing was deleted."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
