"""ElastiCo's MLflow server: MLflow's own app, whose UI opens experiments on their runs ("Model training").

MLflow 3.17's UI picks an experiment's view from its GenAI / Model training switch — the ``workflowType``
in the URL, else the browser's last choice, else GenAI — and not from the experiment's
``mlflow.experimentKind`` tag; so a new browser that clicks an ElastiCo experiment in the list lands on an
empty GenAI overview (0 traces) instead of the job runs. This app is MLflow's server app (``mlflow server
--app-name elastico``, MLflow's plugin mechanism for server apps) with one change: the UI's page sets the
switch's default to Model training for a browser that has made no choice yet. A person who switches to
GenAI keeps that choice; nothing else of MLflow changes (its API, auth, artifacts, static files).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

STORAGE_KEY = "mlflow.workflowType_v1"  # MLflow 3.17's key for the switch (its useLocalStorage, version 1)
DEFAULT_VIEW = "machine_learning"
_KEY, _VALUE = json.dumps(STORAGE_KEY), json.dumps(json.dumps(DEFAULT_VIEW))
SNIPPET = f"<script>try{{if(!localStorage.getItem({_KEY})){{localStorage.setItem({_KEY},{_VALUE})}}}}catch(e){{}}</script>".encode()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def with_default(html: bytes) -> bytes:
    """The UI's ``index.html`` with the default set before MLflow's bundle reads it (first thing in <head>)."""
    at = html.find(b"<head>")
    if at < 0 or SNIPPET in html:
        return html
    at += len(b"<head>")
    return html[:at] + SNIPPET + html[at:]


class ModelTrainingDefault:
    """ASGI middleware: rewrites only the UI page (a GET answered with HTML); streams everything else."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope.get("type") != "http" or scope.get("method") != "GET" or not (path.endswith("/") or path.endswith(".html")):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                assert start is not None
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                html = dict(headers).get(b"content-type", b"").startswith(b"text/html")
                body = with_default(b"".join(chunks)) if html else b"".join(chunks)
                await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await self.app(scope, receive, capture)


def _mlflow_app() -> Any:
    from mlflow.server.fastapi_app import app

    return app


app = ModelTrainingDefault(_mlflow_app())
