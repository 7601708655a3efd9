"""Fixtures for the nanobot_rs tests: a nanobot-ai workspace and sessions root per test,
messages with every field nanobot-ai writes, and a loopback OpenAI-compatible model."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(workspace, sessions_root), both fresh, HOME pointed beside them."""
    monkeypatch.setenv("HOME", str(tmp_path))
    workspace = tmp_path / "workspace"
    root = tmp_path / "state" / "sessions"
    return workspace, root


def every_field_messages() -> list[dict[str, Any]]:
    """One turn with every field nanobot-ai writes, plus fields it does not know."""
    return [
        {"role": "user", "content": "héllo 日本 🌍", "timestamp": "2026-08-20T05:20:57.100000",
         "media": ["/m/a.png"], "_runtime_context": {"channel": "cli"}},
        {"role": "assistant", "content": None, "timestamp": "2026-08-20T05:20:58",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "exec", "arguments": "{\"cmd\": \"ls\"}"},
                         "extra_content": {"google": {"thought_signature": "x"}}}],
         "reasoning_content": "r", "thinking_blocks": [{"type": "thinking", "thinking": "t", "signature": "s"}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "exec",
         "timestamp": "2026-08-20T05:20:59"},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}], "timestamp": "2026-08-20T05:21:00",
         "latency_ms": 1234, "score": 0.5, "flags": [True, False, None], "big": 2**63 + 5,
         "nested": {"a": {"b": [1, 2.25, "three"]}}, "unknown_future_field": {"kept": True}},
    ]


class ScriptedModel:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 answering from a script: each reply
    is an assistant message (dict), given in turn; the requests are kept."""

    def __init__(self, replies: list[dict[str, Any]]):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append(body)
                message = model.replies.pop(0) if model.replies else {"role": "assistant", "content": "(no more)"}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if body.get("stream"):
                    self._stream(message, finish)
                else:
                    self._json({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

            def _json(self, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any], finish: str) -> None:
                delta = dict(message)
                if delta.get("tool_calls"):
                    delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(delta["tool_calls"])]
                chunks = [
                    {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
                ]
                data = b"".join(
                    b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 0,
                                            "model": "test-model", **c}).encode() + b"\n\n"
                    for c in chunks
                ) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_model():
    models: list[ScriptedModel] = []

    def start(replies: list[dict[str, Any]]) -> ScriptedModel:
        model = ScriptedModel(replies)
        models.append(model)
        return model

    yield start
    for model in models:
        model.close()


def no_network_but_loopback() -> None:
    """The tests talk to 127.0.0.1 only; proxies would route loopback elsewhere."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(name, None)
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"


no_network_but_loopback()
