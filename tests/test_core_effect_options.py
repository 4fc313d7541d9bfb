"""The effect options are defined once (EffectOptions): every spelling of the signature agrees with it.

Each public spelling lists the options as keyword parameters; this pins their names,
annotations and defaults to the dataclass fields, so a default or a type cannot drift in
one spelling only (``progress_interval`` was ``1.0`` in one place and a constant in
another, ``lookup`` and ``redact`` were typed ``Any`` in some).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import intentlog
from intentlog.effects import Call, aeffect, effect, prepare
from intentlog.effects.options import PREPARE_OPTIONS, RUN_OPTIONS, EffectOptions
from intentlog.sessions import Session

FIELDS = {f.name: f for f in dataclasses.fields(EffectOptions)}
ALL = tuple(FIELDS)

SPELLINGS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "Task.effect": (intentlog.Task.effect, ALL),
    "effects.effect": (effect, ALL),
    "Task.prepare": (intentlog.Task.prepare, PREPARE_OPTIONS),
    "effects.prepare": (prepare, PREPARE_OPTIONS),
    "Call.run": (Call.run, RUN_OPTIONS),
    "Session.turn": (
        Session.turn,
        ("name", "interpret", "retry", "progress", "inactivity_timeout", "max_duration", "progress_interval"),
    ),
    # the awaitable forms take the very same options
    "Task.aeffect": (intentlog.Task.aeffect, ALL),
    "effects.aeffect": (aeffect, ALL),
    "Call.arun": (Call.arun, RUN_OPTIONS),
    "Session.aturn": (
        Session.aturn,
        ("name", "interpret", "retry", "progress", "inactivity_timeout", "max_duration", "progress_interval"),
    ),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_takes_the_options_with_their_one_type_and_default(spelling: str) -> None:
    fn, expected = SPELLINGS[spelling]
    params = inspect.signature(fn).parameters
    assert set(expected) <= set(params), f"{spelling} lacks {sorted(set(expected) - set(params))}"
    for name in expected:
        p, f = params[name], FIELDS[name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, (spelling, name)
        assert p.annotation == f.type, (spelling, name, p.annotation, f.type)
        assert p.default == f.default, (spelling, name, p.default, f.default)


def test_the_groups_cover_the_options() -> None:
    assert set(PREPARE_OPTIONS) | set(RUN_OPTIONS) == set(ALL)
    assert set(PREPARE_OPTIONS) & set(RUN_OPTIONS) == {"dedup"}
