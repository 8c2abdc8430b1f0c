"""Production providers through the registry, with the real SDKs against mocked HTTP.

OpenAI and Cohere talk httpx: respx answers at the httpx transport. tavily-python
talks ``requests``: :class:`RequestsRouter` replaces only ``HTTPAdapter.send`` (the
socket layer) and builds the answer with requests' own ``build_response``, so the
SDK, the session and the response handling all run. No SDK class is replaced, and
an autouse guard refuses every non-local socket, so nothing can reach a live service.
"""

from __future__ import annotations

import base64
import json
import math
import socket
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import requests
import respx
from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore, TextNode

from enterprise_rag import Principal
from enterprise_rag.config import RagSettings, load_settings
from enterprise_rag.errors import (
    ConfigError,
    LLMError,
    LLMUnavailableError,
    PermissionDeniedError,
    RagError,
    WebSearchError,
)
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.providers import Providers
from enterprise_rag.providers.curated_search import CuratedWebSearch
from enterprise_rag.providers.web_search import EgressPolicy, TavilyWebSearch, WebSearch, host_allowed
from enterprise_rag.schema.sources import WebResult
from tests.support.http import RequestsRouter, clean_env, completion, http_requests, no_network  # noqa: F401  (fixtures)

OPENAI = "https://api.openai.com/v1"
COHERE_RERANK = "https://api.cohere.com/v2/rerank"
TAVILY_SEARCH = "https://api.tavily.com/search"
TAVILY_KEY = "tvly-test-K3Y-0123456789"


# --- no network, clean environment ------------------------------------------------------------------


def test_the_network_guard_refuses_remote_hosts() -> None:
    with pytest.raises(OSError, match="blocked"):
        socket.create_connection(("api.openai.com", 443), timeout=1)
    with pytest.raises(OSError, match="blocked"):
        socket.create_connection(("1.1.1.1", 443), timeout=1)


def _providers(tmp_path: Path, **overrides: Any) -> Providers:
    settings: RagSettings = load_settings(None, data_dir=tmp_path / "data", **overrides)
    return Providers(settings, settings.resolved_data_dir())


# --- OpenAI embeddings -------------------------------------------------------------------------------


def _vector(text: str, dims: int) -> list[float]:
    """A deterministic vector exactly representable in float32 (the API answers float32 base64)."""
    return [((len(text) * 7 + i * 3) % 16 - 8) / 8 for i in range(dims)]


def test_openai_embeddings_through_the_registry(tmp_path: Path) -> None:
    providers = _providers(
        tmp_path,
        embedding={
            "provider": "openai",
            "model": "text-embedding-3-small",
            "dimensions": 8,
            "batch_size": 2,
            "api_key": "sk-test",
        },
    )
    bodies: list[dict[str, Any]] = []

    def embeddings(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        assert request.headers["authorization"] == "Bearer sk-test"
        data = []
        for i, text in enumerate(body["input"]):
            vec = _vector(text, body["dimensions"])
            if body.get("encoding_format") == "base64":
                item: Any = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")
            else:
                item = vec
            data.append({"object": "embedding", "index": i, "embedding": item})
        tokens = sum(len(t.split()) for t in body["input"])
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    texts = ["alpha policy", "beta rule", "gamma exception"]
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/embeddings").mock(side_effect=embeddings)
        vectors = providers.embed_model.get_text_embedding_batch(texts)
        query_vector = providers.embed_model.get_query_embedding("what is the alpha policy?")

    assert route.call_count == 3  # batch_size 2: two calls for three texts, one for the query
    assert [b["input"] for b in bodies] == [texts[:2], texts[2:], ["what is the alpha policy?"]]
    assert {b["model"] for b in bodies} == {"text-embedding-3-small"}
    assert {b["dimensions"] for b in bodies} == {8}
    assert vectors == [_vector(t, 8) for t in texts]
    assert query_vector == _vector("what is the alpha policy?", 8)


# --- OpenAI chat ------------------------------------------------------------------------------------

GRADE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "grade",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"label": {"type": "string", "enum": ["yes", "partial", "no"]}},
            "required": ["label"],
            "additionalProperties": False,
        },
    },
}


def _chat_providers(tmp_path: Path, max_retries: int = 1) -> Providers:
    return _providers(
        tmp_path,
        llm={
            "generator": {
                "provider": "openai",
                "model": "gpt-4o-mini",
                "api_key": "sk-test",
                "max_retries": max_retries,
                "timeout_s": 5,
                "max_tokens": 64,
            }
        },
    )


def test_openai_chat_sends_the_json_schema_and_returns_usage(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path)
    messages = [
        ChatMessage(role="system", content="Grade the passage."),
        ChatMessage(role="user", content="Question: refund window? Passage: 30 days."),
    ]
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(
            return_value=httpx.Response(200, json=completion('{"label": "yes"}'))
        )
        response = providers.generator.chat(messages, response_format=GRADE_SCHEMA)

    assert route.call_count == 1
    request = route.calls.last.request
    assert request.headers["authorization"] == "Bearer sk-test"
    body = json.loads(request.content)
    assert body["response_format"] == GRADE_SCHEMA
    assert body["model"] == "gpt-4o-mini"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64
    assert body["messages"] == [
        {"role": "system", "content": "Grade the passage."},
        {"role": "user", "content": "Question: refund window? Passage: 30 days."},
    ]
    assert json.loads(response.message.content or "") == {"label": "yes"}
    assert isinstance(response.raw, openai.types.chat.ChatCompletion)
    usage = response.raw.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (21, 5, 26)
    assert response.additional_kwargs["prompt_tokens"] == 21  # llama-index copies the counts here too
    assert response.additional_kwargs["completion_tokens"] == 5


def test_openai_chat_retries_a_429_then_succeeds(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path, max_retries=1)
    rate_limited = httpx.Response(
        429,
        json={"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
        headers={"retry-after-ms": "1"},
    )
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(
            side_effect=[rate_limited, httpx.Response(200, json=completion("fine"))]
        )
        started = time.monotonic()
        response = providers.generator.chat([ChatMessage(role="user", content="hi")])
        elapsed = time.monotonic() - started

    assert route.call_count == 2
    assert response.message.content == "fine"
    assert elapsed < 5


@pytest.mark.timeout(30)
def test_openai_chat_500_forever_raises_after_the_retries(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path, max_retries=1)
    failing = httpx.Response(
        500,
        json={"error": {"message": "The server had an error", "type": "server_error"}},
        headers={"retry-after-ms": "1"},
    )
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(return_value=failing)
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts") as caught:
            providers.generator.chat([ChatMessage(role="user", content="hi")])
        elapsed = time.monotonic() - started

    assert isinstance(caught.value.__cause__, openai.InternalServerError)
    assert route.call_count == 2  # the first try and max_retries=1 retry
    assert elapsed < 10


def _with_logprobs(body: dict[str, Any], top: list[tuple[str, float]]) -> dict[str, Any]:
    """An OpenAI chat completion whose one generated token has these alternatives, as the API returns them."""
    entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
    body["choices"][0]["logprobs"] = {"content": [{**entries[0], "top_logprobs": entries}], "refusal": None}
    return body


def test_openai_yes_probability_asks_for_logprobs_and_reads_them_from_the_sdk_response(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path)
    caller = LLMCaller({"grader": providers.generator}, None, timeout_s=10, max_retries=0)
    top = [("Yes", math.log(0.6)), ("No", math.log(0.25)), (" yes", math.log(0.1)), ("The", math.log(0.05))]
    messages = [ChatMessage(role="system", content="Reply yes or no."), ChatMessage(role="user", content="q")]
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(
            return_value=httpx.Response(200, json=_with_logprobs(completion("Yes", 30, 1), top))
        )
        p_yes = caller.yes_probability("grader", "grade", messages, top_logprobs=5)

    body = json.loads(route.calls.last.request.content)
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["max_tokens"] == 1
    assert p_yes == pytest.approx(0.7 / 0.95)
    assert (caller.stats.calls, caller.stats.prompt_tokens, caller.stats.completion_tokens) == (1, 30, 1)


def test_the_prompt_tokens_the_server_read_from_its_cache_are_counted(tmp_path: Path) -> None:
    """OpenAI (and llama.cpp's server) report them as usage.prompt_tokens_details.cached_tokens."""
    providers = _chat_providers(tmp_path)
    caller = LLMCaller({"generator": providers.generator}, None, timeout_s=10, max_retries=0)
    body = completion("An answer.", 1200, 3)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024, "audio_tokens": 0}
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        router.post(f"{OPENAI}/chat/completions").mock(
            side_effect=[httpx.Response(200, json=body), httpx.Response(200, json=completion("Again.", 40, 2))]
        )
        for _ in range(2):
            caller.call("generator", "generate", [ChatMessage(role="user", content="q")], max_tokens=16)
    assert (caller.stats.prompt_tokens, caller.stats.cached_tokens, caller.stats.completion_tokens) == (1240, 1024, 5)


def test_openai_yes_probability_without_yes_or_no_or_without_logprobs_is_none(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path)
    caller = LLMCaller({"grader": providers.generator}, None, timeout_s=10, max_retries=0)
    replies = [
        httpx.Response(200, json=_with_logprobs(completion("The"), [("The", -0.1), ("It", -2.5)])),
        httpx.Response(200, json=completion("Yes")),  # "logprobs": null: a server that does not return them
    ]
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        router.post(f"{OPENAI}/chat/completions").mock(side_effect=replies)
        got = [caller.yes_probability("grader", "grade", [ChatMessage(role="user", content="q")]) for _ in replies]
    assert got == [None, None] and caller.stats.failures == 0


def test_openai_yes_probability_retries_through_the_caller_then_raises(tmp_path: Path) -> None:
    providers = _chat_providers(tmp_path, max_retries=0)
    caller = LLMCaller({"grader": providers.generator}, None, timeout_s=10, max_retries=2, backoff_s=0.01)
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(
            return_value=httpx.Response(500, json={"error": {"message": "down", "type": "server_error"}})
        )
        with pytest.raises(LLMError, match="'grade' failed"):
            caller.yes_probability("grader", "grade", [ChatMessage(role="user", content="q")])
    assert route.call_count == 1  # the SDK's bounded retries (0 here) are not multiplied by the caller's


# --- Cohere rerank ----------------------------------------------------------------------------------


def _nodes() -> list[NodeWithScore]:
    texts = [
        "Expense reports are due within 30 days of travel.",
        "The cafeteria opens at 8 am.",
        "Travel expenses above 500 EUR need a manager's approval before booking.",
        "Parking permits are renewed every January.",
    ]
    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 / (i + 1)) for i, t in enumerate(texts)]


def test_cohere_rerank_reorders_and_cuts_to_top_n(tmp_path: Path) -> None:
    providers = _providers(tmp_path, reranker={"provider": "cohere", "top_n": 2, "api_key": "co-test"})
    nodes = _nodes()
    answer = {
        "id": "rerank-test-1",
        "results": [{"index": 2, "relevance_score": 0.91}, {"index": 0, "relevance_score": 0.37}],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
    }
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(COHERE_RERANK).mock(return_value=httpx.Response(200, json=answer))
        out = providers.reranker.postprocess_nodes(nodes, query_str="who approves travel expenses?")

    assert route.call_count == 1
    request = route.calls.last.request
    assert request.headers["authorization"] == "Bearer co-test"
    body = json.loads(request.content)
    assert body["model"] == "rerank-v3.5"
    assert body["query"] == "who approves travel expenses?"
    assert body["top_n"] == 2
    assert body["documents"] == [n.node.get_content() for n in nodes]
    assert [n.node.node_id for n in out] == ["n2", "n0"]
    assert [n.score for n in out] == [0.91, 0.37]


def test_cohere_unauthorized_is_not_retried(tmp_path: Path) -> None:
    import cohere

    providers = _providers(tmp_path, reranker={"provider": "cohere", "api_key": "co-bad"})
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as router:
        route = router.post(COHERE_RERANK).mock(return_value=httpx.Response(401, json={"message": "invalid api token"}))
        with pytest.raises(cohere.UnauthorizedError):
            providers.reranker.postprocess_nodes(_nodes(), query_str="q")
    assert route.call_count == 1


def test_cohere_without_a_key_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reranker\.api_key"):
        _ = _providers(tmp_path, reranker={"provider": "cohere"}).reranker


# --- Tavily -----------------------------------------------------------------------------------------


def _tavily_providers(tmp_path: Path, **web: Any) -> Providers:
    settings = {"provider": "tavily", "api_key": TAVILY_KEY, "egress_groups": ["research"], **web}
    return _providers(tmp_path, web_search=settings)


TAVILY_ANSWER = {
    "query": "python asyncio timeout",
    "follow_up_questions": None,
    "answer": None,
    "images": [],
    "results": [
        {
            "title": "Coroutines and Tasks",
            "url": "https://docs.python.org/3/library/asyncio-task.html",
            "content": "asyncio.timeout() is an asynchronous context manager ...",
            "score": 0.83,
            "raw_content": None,
        },
        {
            "title": "Evil mirror",
            "url": "https://docs.python.org.evil.example/asyncio",
            "content": "lookalike host",
            "score": 0.99,
            "raw_content": None,
        },
        {
            "title": "Userinfo trick",
            "url": "https://docs.python.org@evil.example/asyncio",
            "content": "credentials-in-URL trick",
            "score": 0.97,
            "raw_content": None,
        },
        {
            "title": "Blog post",
            "url": "https://blog.example.com/asyncio-timeouts",
            "content": "off the allow-list",
            "score": 0.95,
            "raw_content": None,
        },
        {
            "title": "statement_timeout",
            "url": "https://www.postgresql.org/docs/current/runtime-config-client.html",
            "content": "statement_timeout aborts any statement that takes more than ...",
            "score": 0.61,
            "raw_content": None,
            "published_date": "2025-11-13",
        },
    ],
    "response_time": 1.02,
}


def test_tavily_search_sends_the_allow_list_and_drops_results_outside_it(
    tmp_path: Path, http_requests: RequestsRouter
) -> None:
    http_requests.add("POST", TAVILY_SEARCH, (200, TAVILY_ANSWER))
    providers = _tavily_providers(tmp_path, allowed_domains=["docs.python.org", "postgresql.org"], max_results=4)
    search = providers.web_search
    assert isinstance(search, TavilyWebSearch) and isinstance(search, WebSearch)
    assert search.leaves_machine

    results = search.search("python asyncio timeout")

    assert len(http_requests.calls) == 1
    call = http_requests.calls[0]
    assert (call.method, call.url) == ("POST", TAVILY_SEARCH)
    assert call.headers["Authorization"] == f"Bearer {TAVILY_KEY}"
    assert call.headers["Content-Type"] == "application/json"
    body = http_requests.json_body()
    assert body["query"] == "python asyncio timeout"
    assert body["max_results"] == 4
    assert body["include_domains"] == ["docs.python.org", "postgresql.org"]
    assert body["search_depth"] == "basic"
    assert TAVILY_KEY not in json.dumps(body)  # the key travels in the header only

    assert results == [
        WebResult(
            title="Coroutines and Tasks",
            url="https://docs.python.org/3/library/asyncio-task.html",
            content="asyncio.timeout() is an asynchronous context manager ...",
            score=0.83,
        ),
        WebResult(
            title="statement_timeout",
            url="https://www.postgresql.org/docs/current/runtime-config-client.html",
            content="statement_timeout aborts any statement that takes more than ...",
            score=0.61,
            published_date="2025-11-13",
        ),
    ]


def test_tavily_without_an_allow_list_sends_no_include_domains(tmp_path: Path, http_requests: RequestsRouter) -> None:
    http_requests.add("POST", TAVILY_SEARCH, (200, TAVILY_ANSWER))
    results = _tavily_providers(tmp_path).web_search.search("python asyncio timeout", max_results=2)  # type: ignore[union-attr]
    body = http_requests.json_body()
    assert "include_domains" not in body and body["max_results"] == 2
    assert [r.score for r in results] == [0.99, 0.97]  # every http(s) result is eligible; best first, cut to 2


def test_tavily_401_becomes_web_search_error_without_the_key(tmp_path: Path, http_requests: RequestsRouter) -> None:
    # a server that echoes the key back must not get it into our message
    http_requests.add(
        "POST", TAVILY_SEARCH, (401, {"detail": {"error": f"Unauthorized: invalid API key {TAVILY_KEY}"}})
    )
    search = _tavily_providers(tmp_path).web_search
    assert search is not None
    with pytest.raises(WebSearchError) as info:
        search.search("anything")
    message = str(info.value)
    assert isinstance(info.value, RagError)
    assert "401" in message and "API key" in message
    assert TAVILY_KEY not in message and "0123456789" not in message
    assert len(http_requests.calls) == 1


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((500, {"detail": "internal"}), "HTTP 500"),
        ((429, {"detail": {"error": "rate limited"}}), "rate limit"),
        ((403, {"detail": {"error": "plan does not allow search"}}), "403"),
        (requests.ConnectionError("connection refused"), "could not reach Tavily"),
        (requests.ReadTimeout("read timed out"), "did not answer in time"),
    ],
)
def test_tavily_failures_become_web_search_errors(
    tmp_path: Path, http_requests: RequestsRouter, answer: Any, expected: str
) -> None:
    http_requests.add("POST", TAVILY_SEARCH, answer)
    search = _tavily_providers(tmp_path).web_search
    assert search is not None
    with pytest.raises(WebSearchError, match=expected) as info:
        search.search("anything")
    assert TAVILY_KEY not in str(info.value)


def test_tavily_without_a_key_names_the_field(tmp_path: Path) -> None:
    providers = _providers(tmp_path, web_search={"provider": "tavily"})
    with pytest.raises(ConfigError, match=r"web_search\.api_key"):
        _ = providers.web_search
    with pytest.raises(ConfigError, match=r"web_search\.api_key"):
        _ = providers.egress_policy


def test_tavily_key_from_the_environment(
    tmp_path: Path, http_requests: RequestsRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-from-env")
    http_requests.add("POST", TAVILY_SEARCH, (200, {"results": []}))
    assert _providers(tmp_path, web_search={"provider": "tavily"}).web_search.search("q") == []  # type: ignore[union-attr]
    assert http_requests.calls[0].headers["Authorization"] == "Bearer tvly-from-env"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://docs.python.org/3/", True),
        ("http://docs.python.org", True),
        ("https://DOCS.Python.org./x", True),
        ("https://www.postgresql.org/docs", True),
        ("https://postgresql.org:8443/docs", True),
        ("https://docs.python.org.evil.example/", False),
        ("https://docs.python.org@evil.example/", False),
        ("https://evil.example/docs.python.org", False),
        ("https://notpostgresql.org/", False),
        ("ftp://docs.python.org/", False),
        ("javascript:alert(1)", False),
        ("https://[::1", False),
        ("", False),
    ],
)
def test_host_allow_list(url: str, allowed: bool) -> None:
    assert host_allowed(url, ("docs.python.org", "postgresql.org")) is allowed


def test_allowed_domains_must_be_bare_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"web_search\.allowed_domains"):
        _providers(tmp_path, web_search={"allowed_domains": ["https://docs.python.org/3/"]})
    settings = load_settings(None, web_search={"allowed_domains": ["*.Docs.Python.org", "docs.python.org"]})
    assert settings.web_search.allowed_domains == ["docs.python.org"]


# --- egress policy ----------------------------------------------------------------------------------

RESEARCHER = Principal(user_id="ria", groups=["research", "all-staff"])
STAFF = Principal(user_id="sam", groups=["all-staff"])
NOBODY = Principal(user_id="nia")


def test_disabled_web_search_allows_nobody(tmp_path: Path) -> None:
    providers = _providers(tmp_path, web_search={"egress_groups": ["research"]})
    assert providers.web_search is None
    policy = providers.egress_policy
    assert not policy.leaves_machine
    assert [policy.allows(p) for p in (RESEARCHER, STAFF, NOBODY)] == [False, False, False]


def test_tavily_needs_an_egress_group(tmp_path: Path) -> None:
    policy = _tavily_providers(tmp_path).egress_policy  # egress_groups: [research]
    assert policy.leaves_machine
    assert [policy.allows(p) for p in (RESEARCHER, STAFF, NOBODY)] == [True, False, False]
    nobody_may = _tavily_providers(tmp_path, egress_groups=[]).egress_policy
    assert [nobody_may.allows(p) for p in (RESEARCHER, STAFF, NOBODY)] == [False, False, False]


def test_curated_search_needs_no_egress_permission(tmp_path: Path) -> None:
    folder = tmp_path / "curated"
    folder.mkdir()
    providers = _providers(tmp_path, web_search={"provider": "curated", "curated_dir": str(folder)})
    assert isinstance(providers.web_search, CuratedWebSearch)
    policy = providers.egress_policy
    assert not policy.leaves_machine
    assert [policy.allows(p) for p in (RESEARCHER, STAFF, NOBODY)] == [True, True, True]


def test_egress_policy_refuses_a_missing_principal() -> None:
    class Remote:
        leaves_machine = True

        def search(self, query: str, max_results: int | None = None) -> list[WebResult]:
            return []

    policy = EgressPolicy(Remote(), ["research"])
    with pytest.raises(PermissionDeniedError):
        policy.allows(None)  # type: ignore[arg-type]
    with pytest.raises(PermissionDeniedError):
        policy.allows("research")  # type: ignore[arg-type]
    assert policy.allows(Principal("x", ["research"]))


# --- curated local sources --------------------------------------------------------------------------


def _curated_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "curated"
    (folder / "it").mkdir(parents=True)
    (folder / "it" / "vpn.md").write_text(
        "---\nurl: https://intranet.example.com/it/vpn\ntitle: VPN access guide\ndate: 2025-03-01\n---\n"
        "# VPN\n\n## Reset your VPN password\n\nOpen the self-service portal and choose *Reset VPN password*. "
        "The new VPN password works after five minutes.\n\n## Supported clients\n\nWireGuard on every laptop.\n",
        encoding="utf-8",
    )
    (folder / "mfa.txt").write_text(
        "Multi-factor authentication\n\nEvery account needs a second factor. Lost your phone? "
        "Call the service desk to reset the second factor; a password reset alone is not enough.\n",
        encoding="utf-8",
    )
    (folder / "expenses.html").write_text(
        '<html><head><title>Travel expenses</title><link rel="canonical" href="https://intranet.example.com/expenses">'
        "</head><body><nav>Home | VPN | Password</nav><main><h1>Travel expenses</h1>"
        "<p>Submit receipts within 30 days. Hotel costs are capped per city.</p></main></body></html>",
        encoding="utf-8",
    )
    (folder / ".draft.md").write_text("VPN password secret draft", encoding="utf-8")  # hidden: ignored
    (folder / "notes.pdf").write_bytes(b"%PDF-1.4 VPN password")  # not a curated format: ignored
    (folder / "broken.txt").write_bytes(b"VPN password \xff\xfe broken")  # not UTF-8: skipped with a warning
    return folder


def test_curated_search_ranks_by_term_overlap(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _curated_folder(tmp_path)
    search = CuratedWebSearch(folder, max_results=5)
    assert not search.leaves_machine and isinstance(search, WebSearch)

    results = search.search("How do I reset my VPN password?")

    assert [r.url for r in results] == ["https://intranet.example.com/it/vpn", str(folder / "mfa.txt")]
    top = results[0]
    assert top.title == "VPN access guide"
    assert top.published_date == "2025-03-01"
    assert "self-service portal" in top.content and "WireGuard" not in top.content  # the best passage only
    assert 0 < results[1].score < top.score <= 1.0
    assert any("broken.txt" in r.message for r in caplog.records)

    # the HTML page: labelled with its canonical URL, navigation chrome not indexed
    expenses = search.search("hotel receipts")
    assert [(r.url, r.title) for r in expenses] == [("https://intranet.example.com/expenses", "Travel expenses")]
    assert search.search("Home navigation") == []
    assert search.search("the of and") == []  # stop words only
    assert len(search.search("password", max_results=1)) == 1


def test_curated_search_sees_changed_files(tmp_path: Path) -> None:
    folder = _curated_folder(tmp_path)
    search = CuratedWebSearch(folder)
    assert search.search("parental leave") == []
    (folder / "leave.md").write_text("# Parental leave\n\nParental leave is 16 weeks.\n", encoding="utf-8")
    results = search.search("parental leave")
    assert [(r.url, r.title) for r in results] == [(str(folder / "leave.md"), "Parental leave")]
    assert results[0].score == 1.0  # every query term present


def test_curated_settings_need_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"web_search\.curated_dir"):
        load_settings(None, web_search={"provider": "curated"})
    providers = _providers(tmp_path, web_search={"provider": "curated", "curated_dir": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match=r"web_search\.curated_dir"):
        _ = providers.web_search
    with pytest.raises(WebSearchError, match="not a folder"):
        CuratedWebSearch(tmp_path / "missing")
