"""The page's markup helpers, its one stylesheet and its one optional script.

Everything from the record goes through :func:`esc` (``html.escape`` with quotes), in
text and in attribute values alike: a payload is data, never markup or script. No JSON
is embedded in a script: the script reads only the page's own attributes. The page's
Content-Security-Policy allows no network request at all (``default-src 'none'``),
inline styles, and exactly the one script below by its hash -- so even markup that
slipped through could neither run nor load anything.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import html
import re
from collections.abc import Callable, Iterable
from typing import Final

__all__ = [
    "CSP", "SCRIPT", "STAGE_OF_KIND", "STYLE", "commands", "esc", "human_size", "running_since", "stage_class", "table",
]  # fmt: skip


def esc(value: object) -> str:
    """``value`` as text, safe in element content and in a quoted attribute."""
    return html.escape(str(value), quote=True)


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    v = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        v /= 1024
        if v < 1024 or unit == "GiB":
            break
    return f"{v:.1f} {unit}"


def human_duration(first: str | None, last: str | None) -> str:
    """The time between two of the record's timestamps (ISO 8601, UTC), as a person reads it; ``-`` without both."""
    if first is None or last is None:
        return "-"
    try:
        a = _dt.datetime.fromisoformat(first.replace("Z", "+00:00"))
        b = _dt.datetime.fromisoformat(last.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    secs = max(0.0, (b - a).total_seconds())
    if secs < 1:
        return f"{secs * 1000:.0f} ms"
    if secs < 60:
        return f"{secs:.1f} s"
    if secs < 3600:
        return f"{secs / 60:.1f} min"
    return f"{secs / 3600:.1f} h"


def running_since(ts: str, what: str) -> str:
    """Pending work's start, from the record: ``WHAT TS``, and with JavaScript on ``, running for N min``.

    The page bakes in no clock (the same folder gives the same bytes): the recorded ``ts``
    is the ``data-since`` attribute and the text; the page's script fills the ``elapsed``
    span from the reader's clock, and refreshes it every 30 s.
    """
    return (
        f'<span class="since" data-since="{esc(ts)}">{esc(what)} <time>{esc(ts)}</time>'
        '<span class="elapsed"></span></span>'
    )


#: The stage each protocol event puts its call or attempt in, as the timeline names it.
STAGE_OF_KIND: Final = {
    "call.requested": "requested",
    "call.manifest": "manifest",
    "call.resumed": "resumed",
    "call.preparation_failed": "preparation failed",
    "attempt.started": "started",
    "attempt.progress": "progress",
    "attempt.not_sent": "not sent",
    "attempt.errored": "errored",
    "attempt.observed": "observed",
    "attempt.interpreted": "interpreted",
    "attempt.retry_decided": "decided",
    "attempt.timed_out": "timed out",
    "effect.reconciled": "reconciled",
    "call.completed": "completed",
    "call.failed": "failed",
}


def stage_class(stage: str) -> str:
    """The CSS class of a stage or call stage: ``st-`` and the word with ``_``/space as ``-``."""
    return "st-" + re.sub(r"[^a-z0-9]+", "-", stage.lower()).strip("-")


# a command an operator runs, inside a next step: "intentlog [--root P] VERB ..." up to ", " "; " or the end
_COMMAND: Final = re.compile(r"intentlog (?:--root \S+ )?[a-z]+(?: (?!or\b)[^,;()\s]+)*")


def commands(text: str) -> str:
    """``text`` escaped, each ``intentlog ...`` command in it marked up as ``<code class="cmd">``."""
    out: list[str] = []
    pos = 0
    for m in _COMMAND.finditer(text):
        out.append(esc(text[pos : m.start()]))
        out.append(f'<code class="cmd">{esc(m.group())}</code>')
        pos = m.end()
    out.append(esc(text[pos:]))
    return "".join(out)


def table(
    header: Iterable[str],
    rows: Iterable[Iterable[str]],
    *,
    cls: str = "",
    attrs: Callable[[int], str] | None = None,
    ident: str = "",
) -> str:
    """A table; ``header`` is plain text (escaped here), each cell already markup."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        extra = attrs(i) if attrs is not None else ""
        body.append(f"<tr{extra}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    klass = (f' id="{esc(ident)}"' if ident else "") + (f' class="{esc(cls)}"' if cls else "")
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


STYLE: Final = """
:root{--fg:#1d2125;--mut:#5d6770;--bg:#fff;--line:#d9dee3;--soft:#f4f6f8;--red:#b3261e;--redbg:#fdecea;
--amber:#8a5a00;--amberbg:#fff4d6;--green:#1e6b34;--greenbg:#e6f4ea;--blue:#1a4f8b;--bluebg:#e7f0fb;
--violet:#5b3a99;--violetbg:#efe9fa;--grey:#4a4f55;--greybg:#eceff1}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);
margin:0}
main{max-width:1180px;margin:0 auto;padding:16px 20px 60px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);
padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}h4{font-size:14px;margin:12px 0 4px}
.mut{color:var(--mut)}code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
font-size:12.5px}
pre{background:var(--soft);border:1px solid var(--line);padding:8px;overflow:auto;max-height:320px;
white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}th,td{border:1px solid var(--line);
padding:3px 6px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}td{overflow-wrap:break-word}
.scroll{overflow-x:auto}.long{display:inline-block;max-width:18em;overflow-wrap:break-word}
.index td:first-child{white-space:nowrap}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;
white-space:nowrap;border:1px solid transparent}
.ok{color:var(--green);background:var(--greenbg)}.bad{color:var(--red);background:var(--redbg)}
.cmd{display:inline-block;background:#10161c;color:#e8eef3;padding:1px 6px;border-radius:4px;margin:1px 0;
user-select:all}
.resolve{border:2px solid var(--red);background:var(--redbg);border-radius:6px;padding:8px 10px;margin:8px 0}
.resolve.pending{border-color:var(--amber);background:var(--amberbg)}
.resolve strong{color:var(--red)}.resolve.pending strong{color:var(--amber)}
.call{border:1px solid var(--line);border-radius:6px;margin:10px 0;padding:6px 10px}
.call.unknown{border:2px solid var(--red)}.call.unresolved{border-left:6px solid var(--amber)}
.tl{list-style:none;margin:4px 0;padding:0}.tl li{display:flex;gap:8px;align-items:baseline;padding:2px 0;
border-bottom:1px dotted var(--line)}
.tl .seq{min-width:52px;color:var(--mut)}.tl .ts{min-width:210px;color:var(--mut)}
.tl li>.mono:last-child{min-width:0;overflow-wrap:anywhere;flex:1}
.group{margin:4px 0 4px 8px;padding-left:8px;border-left:3px solid var(--line)}
.st-requested,.st-manifest,.st-manifest-recorded{color:var(--grey);background:var(--greybg)}
.st-started,.st-progress{color:var(--blue);background:var(--bluebg)}
.st-effect-unknown,.st-timed-out,.st-errored,.st-failed,.st-preparation-failed,
.st-reconciled-served{color:var(--red);background:var(--redbg);border-color:var(--red)}
.st-observed,.st-interpreted{color:var(--violet);background:var(--violetbg)}
.st-decided,.st-retry-decided,.st-not-sent,.st-reconciled,.st-reconciled-not-served,.st-risk-accepted,
.st-provider-dedup{color:var(--amber);background:var(--amberbg)}
.st-completed,.st-superseded,.st-resumed,.st-compiled{color:var(--green);background:var(--greenbg)}
.state-complete,.state-awaiting-acceptance{color:var(--green);background:var(--greenbg)}
.state-paused-for-review,.state-failed,.state-unreadable,.state-blocked{color:var(--red);
background:var(--redbg)}
.state-interrupted,.state-awaiting-approval,.state-running,.state-scheduled{color:var(--amber);
background:var(--amberbg)}
.state-queued{color:var(--grey);background:var(--greybg)}
.turn{border:1px solid var(--line);border-radius:6px;padding:6px 10px;margin:8px 0}.msg{margin:4px 0}
.msg .role{font-weight:600;margin-right:6px}
.since .elapsed{font-weight:600;color:var(--amber)}
.counts{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}.counts a{text-decoration:none}
.task{border-top:3px solid var(--line);margin-top:26px}
#filters{margin:8px 0;display:flex;flex-wrap:wrap;gap:8px;align-items:center}#filters[hidden]{display:none}
details>summary{cursor:pointer}
@media print{#filters{display:none}}
"""

#: "running for ..." on pending work (from each ``data-since``), then the index's filters: by id, by
#: state, and by any text of the row, its keys and its detail section (payloads shown in place
#: included). Reads the page only; no record data is in the script.
SCRIPT: Final = (
    # "running for ..." of pending work, from each recorded start (data-since) and the reader's clock
    "(function(){function ago(ms){var s=ms/1000;return s<60?Math.round(s)+' s':s<3600?Math.floor(s/60)+' min':"
    "s<172800?(s/3600).toFixed(1)+' h':(s/86400).toFixed(1)+' days';}function tick(){"
    "var e=document.querySelectorAll('[data-since]');for(var i=0;i<e.length;i++){var t=Date.parse("
    "e[i].getAttribute('data-since')),o=e[i].querySelector('.elapsed');if(o&&!isNaN(t))"
    "o.textContent=', running for '+ago(Math.max(0,Date.now()-t));}}tick();setInterval(tick,30000);})();"
    "(function(){var q=document.getElementById('q'),s=document.getElementById('state'),"
    "x=document.getElementById('text'),"
    "f=document.getElementById('filters'),n=document.getElementById('shown');if(!q||!s||!f||!x)return;"
    "f.hidden=false;function hay(r){var d=document.getElementById('task-'+r.getAttribute('data-task'));"
    "return (r.textContent+' '+(r.getAttribute('data-keys')||'')+' '+(d?d.textContent:'')).toLowerCase();}"
    "function run(){var t=q.value.toLowerCase(),v=s.value,w=x.value.toLowerCase(),"
    "rows=document.querySelectorAll('#index-table tbody tr'),k=0;for(var i=0;i<rows.length;i++){var r=rows[i],"
    "ok=(!v||r.getAttribute('data-state')===v)&&(!t||r.getAttribute('data-task').toLowerCase().indexOf(t)>=0)"
    "&&(!w||hay(r).indexOf(w)>=0);"
    "r.hidden=!ok;if(ok)k++;}n.textContent=k+' shown';}"
    "q.addEventListener('input',run);s.addEventListener('change',run);x.addEventListener('input',run);run();})();"
)

_SCRIPT_HASH: Final = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()

#: No request of any kind (default-src 'none'); inline style; only the page's own script, by its hash.
CSP: Final = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_SCRIPT_HASH}'; "
    "img-src 'none'; font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
