"""Sessions: a task whose calls are conversation turns, built on the effect protocol.

``session = ledger.session("chat-42")`` wraps the task ``chat-42``. Each
``session.turn(request, send)`` is one call of the effect protocol under the key
``turn-<n>`` -- the turn's identity -- so everything the protocol guarantees holds for
it: the intent is durable before the send, the raw answer before anything reads it, a
re-run resumes instead of resending, an unknown effect is reconciled, never resent blind.

**The request is hashed message by message.** When the request is a mapping holding a
list under ``messages`` (the OpenAI and Anthropic shape; ``messages_field=`` names
another), each message is canonicalised on its own (timestamp fields dropped at any
depth, credentials redacted, keys sorted) and stored as its own artifact: inline in the
turn's ``call.manifest`` (``messages``: a list of refs, in order) the first time it is
recorded, and referred to by digest alone afterwards -- so a growing conversation
records only its new messages. The call's canonical request is the request with its
message list replaced by the messages' digests, so its hash covers every message's
bytes. ``send`` always receives the request as given.

**Identity and replay.** A ``Session`` numbers the turns asked through it 1, 2, 3 ...
(or pass ``turn=n``). Asking a completed turn again with the same request returns the
saved answer and sends nothing; the same turn with another request hash is refused
(:class:`~intentlog.errors.ResumeRefused`, reason ``DRIFT``), as Stripe refuses an
idempotency key reused with other parameters. Re-running the whole script therefore
replays every completed turn from the record and continues at the first one that is not.

**Acceptance.** A turn is *accepted* by a checkpoint naming it (``task.checkpoint
{phase: "turn-<n>", turn, call, evidence: [the response], status: "accepted"}``) --
the link from a turn to "the checkpoint that accepted it". By default ``turn`` records
that checkpoint as soon as the turn completes; with ``accept=False`` a verifier decides
later with :meth:`Session.accept` or :meth:`Session.reject`. :meth:`Session.history`
returns the completed, accepted turns, for the next prompt; an incomplete or rejected
turn stays in the record (:meth:`Session.turns`) but is left out.

**Exact bytes.** The response is stored as the provider sent it and returned as the same
bytes on every replay: quoted shell text, ``$`` and backticks, ``\\r\\n``, JSON escapes of
lone surrogates, bytes that are not UTF-8. A ``send`` returning ``str`` with lone
surrogates is recorded with the encoding that gives the very same ``str`` back
(:attr:`Turn.text`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, final

from .._internal.types import TurnKwargs, spelled
from ..artifacts.inline import ref_bytes
from ..effects.disk import disk_of
from ..effects.intent import check_not_async, secrets_of
from ..effects.options import EffectOptions
from ..effects.policy import DRIFT
from ..effects.prepare import arun_effect, run_effect
from ..effects.records import bare_ref, store_bytes
from ..errors import IntentlogError, ResumeRefused, UsageError
from ..eventlog.canonical import Canonical, canonicalize, resolve_rules
from ..projections.workstate import CallState, WorkStateFold, work_state
from .turns import TURN_PREFIX, Asked, Turn

if TYPE_CHECKING:
    from .._internal.types import RedactRule, Send, Unpack
    from ..eventlog import Event
    from ..stream import StreamSource, TaskStream

__all__ = ["TURN_PREFIX", "Session", "Turn"]

_TURN_RE: Final = re.compile(r"turn-([1-9][0-9]{0,8})\Z")
_JSON: Final = "application/json"


@final
class Session:
    """A task whose calls are conversation turns; get one with :meth:`intentlog.Ledger.session`.

    ``messages_field`` names the request's list of messages; ``drop`` and ``redact`` are
    the canonicalisation rules (as for :meth:`Task.effect`), applied to every message and
    to the rest of the request. ``accept`` is the default for :meth:`turn`.
    """

    def __init__(
        self,
        task: StreamSource,
        *,
        messages_field: str = "messages",
        drop: Iterable[str] | None = None,
        redact: RedactRule = None,
        accept: bool = True,
    ) -> None:
        if not isinstance(messages_field, str) or not messages_field:
            raise UsageError(f"messages_field must be a non-empty string, not {messages_field!r}")
        resolve_rules(drop, redact)  # a malformed rule is refused before anything is written
        self.task = task  # as given (a Task, or its stream)
        self.stream: TaskStream = task.stream  # what the session is written against
        self.messages_field = messages_field
        self._drop = None if drop is None else tuple(drop)
        self._redact = redact
        self._accept = accept
        self._asked = 0
        self._known: dict[str, int] | None = None  # message digests recorded in this stream -> size
        self._accepted: dict[str, int] | None = None  # calls accepted by a checkpoint -> its seq
        self._judged: set[str] = set()  # calls any checkpoint accepted or rejected: never auto-accepted again

    @property
    def id(self) -> str:
        return self.stream.id

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    # -- asking ----------------------------------------------------------------------

    def _scan(self) -> tuple[dict[str, int], dict[str, int]]:
        """What this stream already holds: message digests (for bare refs) and accepted calls."""
        if self._known is None or self._accepted is None:
            known: dict[str, int] = {}
            accepted: dict[str, int] = {}
            for ev in self.stream.events():
                if ev.kind == "call.manifest":
                    for ref in _refs(ev.data.get("messages")):
                        known[ref["digest"]] = ref["size"]
                elif ev.kind == "task.checkpoint" and isinstance(ev.data.get("call"), str):
                    self._judged.add(ev.data["call"])
                    if ev.data.get("status") == "accepted":
                        accepted[ev.data["call"]] = ev.seq
                    else:
                        accepted.pop(ev.data["call"], None)
            self._known, self._accepted = known, accepted
        return self._known, self._accepted

    def _messages(self, value: Any, secrets: frozenset[str]) -> list[Canonical] | None:
        """Each message of the request canonicalised on its own (None: the request holds no message list)."""
        field = self.messages_field
        if not isinstance(value, Mapping) or not isinstance(value.get(field), list):
            return None
        out: list[Canonical] = []
        for i, message in enumerate(value[field]):
            try:
                out.append(canonicalize(message, drop=self._drop, redact=self._redact, known=secrets))
            except IntentlogError as exc:
                raise UsageError(f"message {i} of the request cannot be recorded: {exc}") from exc
        return out

    def _envelope(self, value: Any, messages: list[Canonical] | None) -> Any:
        """The request as the call records it: its message list replaced by the messages' digests."""
        if messages is None:
            return value
        envelope = {k: v for k, v in value.items() if k != self.messages_field}
        envelope[self.messages_field] = [c.digest for c in messages]
        return envelope

    def _split(
        self, value: Any, secrets: frozenset[str] = frozenset()
    ) -> tuple[Any, list[dict[str, Any]] | None, dict[str, bytes]]:
        """The envelope (messages replaced by digests), the message refs for the manifest, the bytes by digest.

        ``secrets`` (the credentials found anywhere in the request) are scrubbed from every message.
        """
        messages = self._messages(value, secrets)
        if messages is None:
            return value, None, {}
        known, _ = self._scan()
        refs: list[dict[str, Any]] = []
        payloads: dict[str, bytes] = {}
        for c in messages:
            if c.digest in known or c.digest in payloads:  # recorded before (or twice in one request): by digest
                refs.append({"digest": c.digest, "size": len(c.data), "media_type": _JSON})
            else:
                refs.append(store_bytes(self.stream, c.data, _JSON))  # inline when small, else a durable blob
            payloads[c.digest] = c.data
        return self._envelope(value, messages), refs, payloads

    def request_hash(self, request: Any) -> str:
        """The request hash a turn asked with ``request`` records (``"blake3:…"``), computed before it is sent.

        ``request`` is what :meth:`turn` takes (a value, or a callable building it; a
        callable is called, and what it raises is raised). The hash is that of the
        recorded request — its messages hashed one by one, under this session's ``drop``
        and ``redact`` rules — so it differs from :func:`intentlog.request_hash` of a
        request with messages. It does not depend on the turn's number. Binding an
        approval to it (``task.request_approval(id, question, binds=session.request_hash(request))``)
        gates the turn before it exists: pending, rejected or decided for another hash,
        the turn starts no attempt. Nothing is stored or appended.
        """
        value = request() if callable(request) else request
        secrets = secrets_of(value, drop=self._drop, redact=self._redact)
        envelope = self._envelope(value, self._messages(value, secrets))
        return canonicalize(envelope, drop=self._drop, redact=self._redact).digest

    @spelled(TurnKwargs)
    def turn(
        self,
        request: Any,
        send: Send,
        *,
        turn: int | None = None,
        accept: bool | None = None,
        **options: Unpack[TurnKwargs],
    ) -> Turn:
        """Ask one turn (``turn-<n>``), or replay it from the record; returns the :class:`Turn`.

        ``request`` (a value, or a callable building it) is what ``send`` receives. A
        completed turn asked with the same request returns its saved response and sends
        nothing; another request under the same turn raises :class:`ResumeRefused`
        (``DRIFT``) and appends nothing. Every other stage resumes as
        :meth:`Task.effect` does (and raises what it raises: ``EffectUnknown`` for an
        unknown effect, ``CallFailed``...). ``accept`` (default: the session's) records the
        accepting checkpoint once the turn completes. The options
        (:class:`~intentlog._internal.types.TurnKwargs`): ``name``, ``interpret``, ``retry``, and for
        long turns ``progress``, ``inactivity_timeout``, ``max_duration``,
        ``progress_interval`` as for :meth:`Call.run`; checked once, before anything is stored.
        """
        opts = EffectOptions.of(options, TurnKwargs, "Session.turn")
        check_not_async(send, opts.interpret, "Session.turn", "session.aturn")  # before the messages are stored
        asked = self._ask(request, send, turn, opts)
        try:
            run_effect(
                self.stream,
                asked.key,
                asked.build,
                asked.send_sync,
                asked.options,
                extra=asked.extra,
                secrets=asked.secrets,
            )
        except ResumeRefused as exc:
            raise self._drifted(asked.key, exc) from None
        finally:
            self._asked_done(asked)
        return self._answered(asked, accept)

    @spelled(TurnKwargs)
    async def aturn(
        self,
        request: Any,
        send: Send,
        *,
        turn: int | None = None,
        accept: bool | None = None,
        **options: Unpack[TurnKwargs],
    ) -> Turn:
        """:meth:`turn`, awaited, with an async ``send`` (and a sync or async ``interpret``).

        The same turn identity, hashing, replay, drift refusal and acceptance as
        :meth:`turn`, through :func:`intentlog.effects.aeffect`: storing the messages,
        the protocol's record work and the accepting checkpoint run in the task's disk
        thread, never on the event loop; turns of different sessions gathered together
        share their syncs when they share a task's stream.
        """
        opts = EffectOptions.of(options, TurnKwargs, "Session.aturn")
        disk = disk_of(self.stream)
        with disk.using():
            asked = await disk.call(lambda: self._ask(request, send, turn, opts))
            try:
                await arun_effect(
                    self.stream,
                    asked.key,
                    asked.build,
                    asked.send_async,
                    asked.options,
                    extra=asked.extra,
                    secrets=asked.secrets,
                )
            except ResumeRefused as exc:
                raise self._drifted(asked.key, exc) from None
            finally:
                await asyncio.shield(disk.call(lambda: self._asked_done(asked)))
            return await disk.call(lambda: self._answered(asked, accept))  # type: ignore[no-any-return]

    def _ask(self, request: Any, send: Send, turn: int | None, options: EffectOptions) -> Asked:
        """Number the turn, build and split the request (before anything is sent); ``options`` are checked."""
        n = self._asked + 1 if turn is None else turn
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"turn must be a positive integer, not {turn!r}")
        self._asked = n
        options = replace(options, name=options.name or "turn", drop=self._drop, redact=self._redact)
        asked = Asked(n, options, send)
        try:
            asked.value = request() if callable(request) else request
            asked.secrets = secrets_of(asked.value, drop=self._drop, redact=self._redact)
            asked.build, asked.refs, asked.payloads = self._split(asked.value, asked.secrets)
        except Exception as exc:  # recorded as the turn's preparation failure, like any request that cannot be built
            asked.build = _raiser(exc)
        return asked

    def _drifted(self, key: str, exc: ResumeRefused) -> ResumeRefused:
        if exc.reason != DRIFT:
            return exc
        return ResumeRefused(
            call_id=exc.call_id,
            key=key,
            reason=DRIFT,
            next_operation=exc.next_operation,
            detail=f"{key} of session {self.id!r} is recorded with another request ({exc.detail}); the same "
            "turn identity with a different request is refused: ask it as a new turn, or fork the session "
            f"from it: intentlog fork {self.id} --from {key}",
        )

    def _asked_done(self, asked: Asked) -> None:
        if asked.refs is not None:
            self._remember(asked.key, asked.build, asked.refs)

    def _answered(self, asked: Asked, accept: bool | None) -> Turn:
        """The turn as recorded; accepted by a checkpoint when it completed and nobody judged it yet."""
        st = self._state(asked.key)
        self._scan()
        # a verdict already recorded (a reviewer's rejection included) is never overridden by a re-run
        if (self._accept if accept is None else accept) and st.stage == "completed" and st.call_id not in self._judged:
            self._record_acceptance(st, "accepted", note="accepted on completion", by=None)
        return self._turn(asked.number, st, asked.refs or [], asked.payloads, replayed=not asked.sent)

    def _remember(self, key: str, envelope: Any, refs: list[dict[str, Any]]) -> None:
        """Note the message digests the record now holds: only when the key's call records this very request."""
        try:
            want = canonicalize(envelope, drop=self._drop, redact=self._redact).digest
            fold = self.stream.live()
        except IntentlogError:  # the run failed before recording anything (a busy task, say)
            return
        cid = fold.latest_call(key)
        if cid is not None and fold.call_state(cid).request_hash == want:
            known, _ = self._scan()
            for ref in refs:
                known[ref["digest"]] = ref["size"]

    def _state(self, key: str) -> CallState:
        fold = self.stream.live()
        cid = fold.latest_call(key)
        if cid is None:  # pragma: no cover - run_effect records the key or raises
            raise IntentlogError(f"session {self.id!r}: {key} has no call in the record")
        return fold.call_state(cid)

    def _load_response(self, st: CallState) -> bytes | None:
        ref = st.response
        if ref is None:
            return None
        return ref_bytes(ref, self.stream.store)

    def _turn(
        self, n: int, st: CallState, refs: list[dict[str, Any]], payloads: dict[str, bytes], *, replayed: bool
    ) -> Turn:
        _, accepted = self._scan()

        def load(ref: Mapping[str, Any]) -> bytes:
            got = payloads.get(str(ref.get("digest")))
            return got if got is not None else self._load_ref(ref, {})

        return Turn(
            session=self.id,
            number=n,
            state=st,
            messages=tuple(bare_ref(r) for r in refs),
            response=self._load_response(st),
            accepted=st.call_id in accepted,
            checkpoint=accepted.get(st.call_id),
            replayed=replayed,
            load=load,
        )

    def _load_ref(self, ref: Mapping[str, Any], inline: Mapping[str, Mapping[str, Any]]) -> bytes:
        return ref_bytes(ref, self.stream.store, inline_index=inline)

    # -- verifying ---------------------------------------------------------------------

    def _record_acceptance(self, st: CallState, status: str, *, note: str | None, by: str | None) -> Event:
        from ..checkpoints import record_checkpoint

        evidence = [bare_ref(st.response)] if st.response is not None else []
        ev = record_checkpoint(
            self.stream, st.key, status=status, note=note, by=by, turn=st.key, call=st.call_id, _refs=evidence
        )
        _, accepted = self._scan()
        self._judged.add(st.call_id)
        if status == "accepted":
            accepted[st.call_id] = ev.seq
        else:
            accepted.pop(st.call_id, None)
        return ev

    def _resolve(self, turn: Turn | str | int) -> CallState:
        if isinstance(turn, Turn) and turn.session != self.id:
            raise UsageError(
                f"{turn.turn_id} belongs to session {turn.session!r}, not {self.id!r}: accept or reject it there "
                f"(ledger.session({turn.session!r})); here {turn.turn_id} is another turn"
            )
        key = turn.turn_id if isinstance(turn, Turn) else f"{TURN_PREFIX}{turn}" if isinstance(turn, int) else turn
        if not isinstance(key, str) or _TURN_RE.match(key) is None:
            raise UsageError(f"name a turn as a Turn, its number or 'turn-<n>', not {turn!r}")
        if not self.stream.exists():  # a refusal must not create the session it refuses
            raise UsageError(f"session {self.id!r} has no {key}; see session.turns()")
        fold = self.stream.live()
        cid = fold.latest_call(key)
        if cid is None:
            raise UsageError(f"session {self.id!r} has no {key}; see session.turns()")
        st = fold.call_state(cid)
        if st.stage != "completed":
            raise UsageError(
                f"{key} of session {self.id!r} is {st.stage.replace('_', ' ')}, not completed: only a completed "
                "turn is accepted or rejected"
            )
        return st

    def accept(self, turn: Turn | str | int, *, note: str | None = None, by: str | None = None) -> Event:
        """Record the checkpoint that accepts a completed turn (its response as evidence); it enters history()."""
        return self._record_acceptance(self._resolve(turn), "accepted", note=note, by=by)

    def reject(self, turn: Turn | str | int, *, note: str | None = None, by: str | None = None) -> Event:
        """Record a checkpoint refusing a completed turn (status ``rejected``): it leaves history() and the task
        pauses for review until a later checkpoint."""
        return self._record_acceptance(self._resolve(turn), "rejected", note=note, by=by)

    # -- reading ---------------------------------------------------------------------

    def turns(self) -> list[Turn]:
        """Every turn in the record, in turn order, incomplete ones included (for audit). Takes no lock."""
        fold = WorkStateFold(self.id)
        manifests: dict[str, list[dict[str, Any]]] = {}
        inline: dict[str, Mapping[str, Any]] = {}
        verdicts: dict[str, tuple[bool, int | None]] = {}
        for ev in self.stream.events():
            fold.apply(ev)
            d = ev.data
            if ev.kind == "call.manifest" and isinstance(d.get("call"), str):
                refs = _refs(d.get("messages"))
                manifests[d["call"]] = refs
                for r in refs:
                    if "inline" in r or "inline_b64" in r:
                        inline.setdefault(r["digest"], r)
            elif ev.kind == "task.checkpoint" and isinstance(d.get("call"), str):
                verdicts[d["call"]] = (d.get("status") == "accepted", ev.seq)
        ws = fold.result()
        out: list[Turn] = []
        for key, cid in ws.keys.items():
            m = _TURN_RE.match(key)
            if m is None:
                continue
            st = ws.calls[cid]
            refs = manifests.get(cid, [])
            ok, seq = verdicts.get(cid, (False, None))

            def load(ref: Mapping[str, Any], _inline: Mapping[str, Mapping[str, Any]] = inline) -> bytes:
                return self._load_ref(ref, _inline)

            out.append(
                Turn(
                    session=self.id,
                    number=int(m.group(1)),
                    state=st,
                    messages=tuple(bare_ref(r) for r in refs),
                    response=self._load_response(st),
                    accepted=ok and st.stage == "completed",
                    checkpoint=seq if ok else None,
                    replayed=True,
                    load=load,
                )
            )
        out.sort(key=lambda t: t.number)
        return out

    def history(self) -> list[Turn]:
        """The completed, accepted turns, in order: what the next prompt is built from.

        A turn that did not complete (no answer, an unknown effect, a failure) or that a
        verifier rejected stays in the record -- see :meth:`turns` -- but is left out.
        """
        return [t for t in self.turns() if t.completed and t.accepted]

    def next_turn(self) -> int:
        """The first turn number with nothing recorded: where a script that does not re-ask earlier turns goes on."""
        keys = work_state(self.stream.events(), task_id=self.id).keys
        numbers = [int(m.group(1)) for k in keys if (m := _TURN_RE.match(k)) is not None]
        return max(numbers, default=0) + 1


def _refs(value: object) -> list[dict[str, Any]]:
    """The well-formed refs of a recorded list (a projection never trusts a field's shape)."""
    if not isinstance(value, list):
        return []
    return [r for r in value if isinstance(r, dict) and isinstance(r.get("digest"), str) and type(r.get("size")) is int]


def _raiser(exc: Exception) -> Callable[[], Any]:
    """A request builder that fails as building the request did: the protocol records the failure."""

    def build() -> Any:
        raise exc

    return build
