"""The effect options are checked once, at the public boundary, and forwarded typed.

Every public spelling takes its options as ``**options: Unpack[<TypedDict>]`` and shows
them in its signature; the boundary turns them into one checked ``EffectOptions`` that
nothing below checks again. A value whose checks can be counted (a float that counts the
comparisons made on it) shows how many times each spelling checks it, and the record
shows that a refused call wrote nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from effect_child import disk_events, snapshot

import intentlog
import intentlog.http
from intentlog import effects
from intentlog._internal.types import EffectKwargs, PrepareKwargs, RunKwargs, TurnKwargs
from intentlog.effects import Call
from intentlog.effects.options import EffectOptions
from intentlog.http import HashKwargs, HttpKwargs
from intentlog.sessions import Session


class Counted(float):
    """A number of seconds that counts how often it is compared (each check of it compares it)."""

    compared = 0

    def __ge__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) >= other  # type: ignore[operator,no-any-return]

    def __gt__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) > other  # type: ignore[operator,no-any-return]

    def __lt__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) < other  # type: ignore[operator,no-any-return]

    def __le__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) <= other  # type: ignore[operator,no-any-return]


def _send(_request: Any) -> bytes:
    return b'{"ok": true}'


def _effect(task: intentlog.Task, **options: Any) -> Any:
    return task.effect("k", {"q": 1}, _send, **options)


def _aeffect(task: intentlog.Task, **options: Any) -> Any:
    return asyncio.run(task.aeffect("k", {"q": 1}, _send, **options))


def _effects_effect(task: intentlog.Task, **options: Any) -> Any:
    return effects.effect(task.stream, "k", {"q": 1}, _send, **options)


def _effects_aeffect(task: intentlog.Task, **options: Any) -> Any:
    return asyncio.run(effects.aeffect(task.stream, "k", {"q": 1}, _send, **options))


def _turn(task: intentlog.Task, **options: Any) -> Any:
    return Session(task).turn({"messages": [{"role": "user", "content": "hi"}]}, _send, **options)


def _aturn(task: intentlog.Task, **options: Any) -> Any:
    session = Session(task)
    return asyncio.run(session.aturn({"messages": [{"role": "user", "content": "hi"}]}, _send, **options))


RUNNING: dict[str, Callable[..., Any]] = {
    "Task.effect": _effect,
    "Task.aeffect": _aeffect,
    "effects.effect": _effects_effect,
    "effects.aeffect": _effects_aeffect,
    "Session.turn": _turn,
    "Session.aturn": _aturn,
}


@pytest.mark.parametrize("spelling", sorted(RUNNING))
def test_each_option_is_checked_once_per_call(tmp_path: Path, spelling: str) -> None:
    """One effect through any spelling compares its progress_interval exactly once (it was checked up to 3 times)."""
    task = intentlog.open(tmp_path / "ledger").task("t")
    Counted.compared = 0
    RUNNING[spelling](task, progress_interval=Counted(0.5))
    assert Counted.compared == 2  # one check: 0 <= interval (reflected to __ge__) and interval < inf
    kinds = [e["kind"] for e in disk_events(task.path)]
    assert "call.completed" in kinds


def test_call_run_checks_its_options_once(tmp_path: Path) -> None:
    """A prepared call's run checks the run options once, and the prepare options were checked at prepare."""
    task = intentlog.open(tmp_path / "ledger").task("t")
    call = task.prepare("k", {"q": 1}, name="one")
    Counted.compared = 0
    assert call.run(_send, progress_interval=Counted(0.5)) == b'{"ok": true}'
    assert Counted.compared == 2
    assert [e["kind"] for e in disk_events(task.path)][-1] == "call.completed"


@pytest.mark.parametrize("spelling", sorted(RUNNING))
def test_a_bad_option_raises_the_same_error_once_and_writes_nothing(tmp_path: Path, spelling: str) -> None:
    """A bad value is refused with the one UsageError of its check, checked once, before anything is written."""
    root = tmp_path / "ledger"
    task = intentlog.open(root).task("t")
    before = snapshot(root)
    Counted.compared = 0
    with pytest.raises(intentlog.UsageError) as bad:
        RUNNING[spelling](task, progress_interval=Counted(-1.0))
    assert str(bad.value) == "progress_interval must be a non-negative number of seconds, not -1.0"
    assert Counted.compared == 1  # 0 <= -1.0 fails: refused at the first comparison of the one check
    with pytest.raises(intentlog.UsageError, match="retry must be a RetryPolicy, not int"):
        RUNNING[spelling](task, retry=3)
    with pytest.raises(intentlog.UsageError, match=r"^send \(and interpret, when given\) must be callables$"):
        RUNNING[spelling](task, interpret="json")
    assert snapshot(root) == before
    assert not task.exists()


def test_an_unknown_option_is_a_type_error_naming_the_spelling(tmp_path: Path) -> None:
    """A misspelt or misplaced option raises TypeError as Python does for an unexpected keyword argument."""
    root = tmp_path / "ledger"
    task = intentlog.open(root).task("t")
    with pytest.raises(TypeError, match=r"^Task\.effect\(\) got an unexpected keyword argument 'retries'$"):
        task.effect("k", {}, _send, retries=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Task\.prepare\(\) got an unexpected keyword argument 'retry'$"):
        task.prepare("k", {}, retry=intentlog.RetryPolicy())  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Session\.turn\(\) got an unexpected keyword argument 'dedup'$"):
        Session(task).turn({}, _send, dedup=None)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^replay\(\) got an unexpected keyword argument 'retryable'$"):
        intentlog.http.replay(task, retryable=None)  # type: ignore[call-arg]
    assert not task.exists()


FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(EffectOptions)}


def _written(hint: Any) -> str:
    """An annotation as written in the source (a TypedDict keeps it as a forward reference)."""
    return str(getattr(hint, "__forward_arg__", hint))


SIGNATURES: dict[str, tuple[Callable[..., Any], type]] = {
    "Task.effect": (intentlog.Task.effect, EffectKwargs),
    "Task.aeffect": (intentlog.Task.aeffect, EffectKwargs),
    "Task.prepare": (intentlog.Task.prepare, PrepareKwargs),
    "effects.effect": (effects.effect, EffectKwargs),
    "effects.aeffect": (effects.aeffect, EffectKwargs),
    "effects.prepare": (effects.prepare, PrepareKwargs),
    "Call.run": (Call.run, RunKwargs),
    "Call.arun": (Call.arun, RunKwargs),
    "Session.turn": (Session.turn, TurnKwargs),
    "Session.aturn": (Session.aturn, TurnKwargs),
    "http.transport": (intentlog.http.transport, HttpKwargs),
    "http.async_transport": (intentlog.http.async_transport, HttpKwargs),
    "http.client": (intentlog.http.client, HttpKwargs),
    "http.async_client": (intentlog.http.async_client, HttpKwargs),
    "http.replay": (intentlog.http.replay, HashKwargs),
}


@pytest.mark.parametrize("spelling", sorted(SIGNATURES))
def test_the_public_signatures_expose_the_option_names_and_forward_them_typed(spelling: str) -> None:
    """inspect shows every option as a keyword parameter; the code takes them as **options: Unpack[...]."""
    fn, kwargs = SIGNATURES[spelling]
    params = inspect.signature(fn).parameters
    names = list(kwargs.__annotations__)
    assert names and set(names) <= set(params), sorted(set(names) - set(params))
    for name in names:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].annotation == _written(kwargs.__annotations__[name]), name
    if spelling in ("http.client", "http.async_client"):  # other keywords go to the client
        assert list(params)[-1] == "kwargs" and params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
        return
    assert fn.__annotations__["options"] == f"Unpack[{kwargs.__name__}]"
    assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]


def test_the_typeddicts_and_the_dataclass_declare_the_same_options() -> None:
    """Each TypedDict key is an EffectOptions field with the same annotation: the two cannot drift apart."""
    for kwargs in (EffectKwargs, PrepareKwargs, RunKwargs, TurnKwargs):
        for name, hint in kwargs.__annotations__.items():
            assert _written(hint) == FIELD_TYPES[name], (kwargs.__name__, name)
    assert list(EffectKwargs.__annotations__) != [] and set(EffectKwargs.__annotations__) == set(FIELD_TYPES)


def test_http_runs_on_the_stream_core_and_honours_the_named_key(tmp_path: Path) -> None:
    """A transport made from a task or from its stream records the same call under the key named by task.key."""
    pytest.importorskip("httpx")
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True})

    task = intentlog.open(tmp_path / "ledger").task("t")
    for given in (task, task.stream):
        client = httpx.Client(transport=intentlog.http.transport(given, inner=httpx.MockTransport(answer)))
        intentlog.http.restart(given)  # as a new process would: the record from its start
        with task.key("named"):
            assert client.get("https://example.test/x").json() == {"ok": True}
        assert task.current_key() is None
    requested = [e["data"]["key"] for e in disk_events(task.path) if e["kind"] == "call.requested"]
    assert requested == ["named"]  # the second made no new call: the first's record answered it
    with pytest.raises(intentlog.UsageError, match="needs a task"):
        intentlog.http.transport(object(), inner=httpx.MockTransport(answer))
