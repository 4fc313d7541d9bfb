"""The graph a killed child runs, and the fake mail service it sends through (not a test module).

Run as a script (``python tests/langgraph_child.py LEDGER MAIL_URL THREAD [--stop-at B MARKER]``)
it compiles a three-node graph on an :class:`~intentlog.langgraph.IntentlogSaver` --
``draft`` (a plain node; with ``--model URL`` a model call through LangChain's
``ChatOpenAI`` and ``intentlog.http``), ``send`` (calls the ``send_email`` tool, wrapped by
``intentlog_tool``) and ``log`` (a plain node) -- and runs the thread: from its input
when the thread has no checkpoint, else resumed from where it stopped. It prints one
JSON line: ``{"ok": true, "state": ...}`` or ``{"error": type, "message", "commands"}``.

``--stop-at B`` makes the child write ``MARKER`` at boundary ``B`` and then wait, for the
parent to ``SIGKILL`` it: ``in-draft``, ``after-model`` (with ``--model``: the model
answered, ``draft`` did not return), ``before-tool`` (in ``send``, before the tool is
called), ``after-tool`` (the tool returned, ``send`` did not) and ``in-log``. The
boundaries inside the tool call are the mail service's (:class:`MailService`
``hold``): ``before-receipt`` (the request arrived, nothing recorded) and
``after-receipt`` (the mail is sent and in the receipt log; no answer yet).

:class:`MailService` is a loopback HTTP server keeping its own fsync'd receipt log --
the ground truth the ledger's claims are checked against: every mail it accepts is
appended and fsynced *before* it answers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypedDict

_STOP: dict[str, str] = {}


def boundary(name: str) -> None:
    """At the named boundary, say so in the marker file and wait to be killed."""
    if _STOP.get("at") == name:
        Path(_STOP["marker"]).write_text(name)
        threading.Event().wait()  # the parent SIGKILLs this process; nothing after this runs


class MailService:
    """``POST /send`` ``{"to", "subject", "body"}`` → ``{"message_id": "m-N"}``; the receipt is durable first.

    ``hold`` = ``"before-receipt"`` or ``"after-receipt"`` makes the next request write
    ``marker`` at that point and wait until :meth:`stop` (the client is killed meanwhile).
    ``responses[n]`` keeps the bytes of every answer it made or would have made.
    """

    def __init__(self, receipts: Path) -> None:
        self.receipts = receipts
        self.hold: str | None = None
        self.marker: Path | None = None
        self.responses: dict[int, bytes] = {}
        self._release = threading.Event()
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = service.accept(body)
                if answer is None:
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client killed mid-request leaves a broken pipe: expected here

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/send"

    def _wait_here(self, point: str) -> bool:
        if self.hold == point and self.marker is not None:
            self.hold = None
            self.marker.write_text(point)
            self._release.wait()
            return True
        return False

    def accept(self, body: bytes) -> bytes | None:
        if self._wait_here("before-receipt"):
            return None  # its client was killed while it held the request: the mail is never sent
        mail = json.loads(body)
        with self._lock:
            n = len(read_receipts(self.receipts)) + 1
            receipt = {"n": n, "to": mail["to"], "body_sha256": hashlib.sha256(body).hexdigest()}
            fd = os.open(self.receipts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, json.dumps(receipt, sort_keys=True).encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            answer = json.dumps({"message_id": f"m-{n}"}).encode()
            self.responses[n] = answer
        self._wait_here("after-receipt")
        return answer

    def __enter__(self) -> MailService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


def read_receipts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


class Mail(TypedDict, total=False):
    to: str
    body: str
    message_id: str
    logged: int


def build(root: str, mail_url: str, model_url: str | None = None) -> Any:
    from langgraph.graph import END, START, StateGraph

    from intentlog.langgraph import IntentlogSaver, intentlog_tool, node_run

    saver = IntentlogSaver(root, take_over_after=0)

    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email (the side effect that must happen at most once)."""
        data = json.dumps({"to": to, "subject": subject, "body": body}).encode()
        req = urllib.request.Request(mail_url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as resp:
            return str(json.loads(resp.read())["message_id"])

    tool = intentlog_tool(send_email, saver)

    def draft(state: Mail) -> Mail:
        boundary("in-draft")
        return {"body": f"Hello {state['to']}, your order has shipped."}

    def agent(state: Mail) -> Mail:
        """The body written by a model: LangChain's ChatOpenAI through intentlog.http, keyed by the node's task."""
        from langchain_openai import ChatOpenAI

        import intentlog.http

        task, where = node_run(saver)
        llm = ChatOpenAI(
            model="gpt-fake",
            base_url=f"{model_url}/v1",
            api_key="sk-test-langgraph",
            http_client=intentlog.http.client(task),
            max_retries=0,
        )
        with task.key(f"model:{where}"):
            reply = llm.invoke([("user", f"Write a one-line shipping note for {state['to']}")])
        boundary("after-model")
        return {"body": str(reply.content)}

    def send(state: Mail) -> Mail:
        boundary("before-tool")
        message_id = tool(to=state["to"], subject="Shipped", body=state["body"])
        boundary("after-tool")
        return {"message_id": message_id}

    def log(state: Mail) -> Mail:
        boundary("in-log")
        return {"logged": 1}

    graph = StateGraph(Mail)
    graph.add_node("draft", agent if model_url else draft)
    graph.add_node("send", send)
    graph.add_node("log", log)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "send")
    graph.add_edge("send", "log")
    graph.add_edge("log", END)
    return graph.compile(checkpointer=saver), saver


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("mail_url")
    parser.add_argument("thread")
    parser.add_argument("--stop-at", nargs=2, metavar=("BOUNDARY", "MARKER"))
    parser.add_argument("--model", help="the base URL of an OpenAI-compatible server: the draft is a model's")
    args = parser.parse_args(argv)
    if args.stop_at:
        _STOP["at"], _STOP["marker"] = args.stop_at
    graph, saver = build(args.root, args.mail_url, args.model)
    config = {"configurable": {"thread_id": args.thread}}
    try:
        started = saver.get_tuple(config) is not None
        state = graph.invoke(None if started else {"to": "ana@example.com"}, config)
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc), "commands": getattr(exc, "commands", [])}))
        return 1
    finally:
        saver.close()
    print(json.dumps({"ok": True, "state": state}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
