"""HTTP for provider tests: no real network, no provider keys from the environment, canned completions,
and a transport-level router for ``requests`` (tavily-python)."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import urllib3

_ENV = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
    "COHERE_API_KEY", "CO_API_KEY", "CO_API_URL",
    "TAVILY_API_KEY", "TAVILY_HTTP_PROXY", "TAVILY_HTTPS_PROXY", "TAVILY_PROJECT", "TAVILY_ORG_ID",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
)  # fmt: skip


def _is_local(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if not isinstance(host, str):
        return False
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every socket connection and DNS lookup except unix sockets and loopback."""
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def _check(sock: socket.socket, address: Any) -> None:
        if sock.family != getattr(socket, "AF_UNIX", object()) and not _is_local(address):
            raise OSError(f"network access is blocked in tests (tried {address!r})")

    def connect(sock: socket.socket, address: Any) -> None:
        _check(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        _check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _is_local(host.decode() if isinstance(host, bytes) else host):
            raise socket.gaierror(f"DNS lookups are blocked in tests (tried {host!r})")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ENTERPRISE_RAG_") or name in _ENV:
            monkeypatch.delenv(name)


def completion(content: str, prompt_tokens: int = 21, completion_tokens: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "system_fingerprint": "fp_test",
    }


# --- requests-level router for tavily-python ---------------------------------------------------------

Handler = Callable[[requests.PreparedRequest], tuple[int, Any]]


class RequestsRouter:
    """Answers ``requests`` at the transport adapter: recorded JSON per (method, url), or an exception."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Handler | BaseException]] = {}
        self.calls: list[requests.PreparedRequest] = []

    def add(self, method: str, url: str, *answers: tuple[int, Any] | Handler | BaseException) -> None:
        handlers: list[Handler | BaseException] = []
        for answer in answers:
            if isinstance(answer, tuple):
                handlers.append(lambda _req, _a=answer: _a)  # type: ignore[misc]
            else:
                handlers.append(answer)
        self.routes[(method.upper(), url)] = handlers

    def send(self, adapter: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, **_: Any) -> Any:
        self.calls.append(request)
        handlers = self.routes.get((str(request.method), str(request.url)))
        if not handlers:
            raise AssertionError(f"unmocked HTTP call: {request.method} {request.url}")
        handler = handlers.pop(0) if len(handlers) > 1 else handlers[0]  # the last answer repeats
        if isinstance(handler, BaseException):
            raise handler
        status, payload = handler(request)
        body = json.dumps(payload).encode("utf-8")
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(body),
            headers={"Content-Type": "application/json", "Content-Length": str(len(body))},
            status=status,
            preload_content=False,
        )
        return adapter.build_response(request, raw)

    def json_body(self, i: int = -1) -> dict[str, Any]:
        body = self.calls[i].body
        assert body is not None
        return json.loads(body)  # type: ignore[no-any-return]


@pytest.fixture
def http_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[RequestsRouter]:
    router = RequestsRouter()

    def send(adapter: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        return router.send(adapter, request, **kwargs)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", send)
    yield router
