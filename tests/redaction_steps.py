"""Backlog steps that hand the library credentials in their result and in their failure text."""

from __future__ import annotations

from typing import Any

import intentlog

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLXZhbHVlLTEyMzQ"
RESULT_TOKEN = "rt-9c8b7a6f5e4d3c2b1a"
PROVIDER_KEY = "sk-live-9f8e7d6c5b4a3f2e1d0c"
SPACE_TOKEN = "7c1e9a3b5d2f8e4a"
TELEGRAM = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
DB_PASSWORD = "Dbpw-Xq93-Lk27-Rt55"


def leaky_result(task: intentlog.Task, payload: Any) -> Any:
    """Returns a result holding a credential by name and a JWT inside a longer text."""
    return {"ok": True, "n": payload["n"], "session_token": RESULT_TOKEN, "text": f"issued {JWT} to the caller"}


def leaky_failure(task: intentlog.Task, payload: Any) -> Any:
    """Fails with an exception text holding credentials by their shape only."""
    raise RuntimeError(
        f"upstream refused key {PROVIDER_KEY}: token {SPACE_TOKEN} at https://api.telegram.org/bot{TELEGRAM}/sendMessage"
        f" (connecting with password={DB_PASSWORD})"
    )
