"""Permission leak harness: a generated corpus with its ACL oracle, hostile probe strategies, one checker per path.

Shared by tests/security/test_leakage.py (bounded probes, in the default test run) and
benchmarks/leakage.py (thousands of probes, prints leaks per 1,000 probes).

Each generated document has its own ACL (groups and users with hostile names) and a
unique marker token in every paragraph, so a leak is visible by text as well as by
document id. The oracle is plain Python over the generated ACLs. Every checker runs a
real path of the package for one probe (principal + question) and returns how many
passages it exposed that the principal may not read; the harness never asserts, so
the benchmark can count and the tests can fail with the details.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import string
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import requests
import urllib3
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore

from enterprise_rag import EnterpriseRAG, PermissionDeniedError, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.llm import prompts
from enterprise_rag.principal import storable_name
from enterprise_rag.retrieval.merging import expand_within_section
from enterprise_rag.retrieval.retriever import PermissionScopedRetriever, Retriever
from enterprise_rag.store.parents import fetch_ancestors
from enterprise_rag.store.search import Hit, SearchParams, search
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.testing import ScriptedLLM, written_for_readers, yes_probability
from tests.support.acl import CachedQueryEmbedding, RecordingReranker, document_text
from tests.support.databases import owner_connection
from tests.support.workflow import passage_in, sources_in

# --- hostile alphabets --------------------------------------------------------------------------------

HOSTILE_PIECES = [
    "'", '"', "`", "[", "]", "{", "}", "(", ")", "%", "_", "\\", "--", ";", "/*", "*/", "::", "?|", "||", "&&",
    ",", " ", "\t", "\n", "' OR 1=1 --", "'; DROP TABLE rag_nodes; --", "zz'] OR 1=1 OR metadata_::jsonb ?| array['y",
    '{"a":1}', '{"allowed_groups":["*"]}', "[1,2]", "{eng,hr}", "NULL", "null", "true", "*", "1e3", "007",
    "$1", "%(groups)s", "${EMBED_DIM}", "Grüße", "グループ", "🙂", "naïve café", "\u200b", "ｅｎｇ", "\u202e",
]  # fmt: skip
_PIECE = st.one_of(st.sampled_from(HOSTILE_PIECES), st.characters(codec="utf-8"))
hostile_text = st.lists(_PIECE, max_size=24).map("".join)
very_long_text = st.builds(lambda s, n: (s or "x") * n, hostile_text, st.integers(200, 2000)).map(lambda s: s[:12_000])

# Near misses of a real name: each must grant nothing that the real name grants alone.
MUTATIONS: dict[str, Callable[[str], str]] = {
    "upper": str.upper, "lower": str.lower, "title": str.title, "lead_space": lambda s: " " + s,
    "trail_space": lambda s: s + " ", "quote_doubled": lambda s: s.replace("'", "''"), "pct": lambda s: s + "%",
    "pct_front": lambda s: "%" + s, "underscore": lambda s: s[:-1] + "_", "chop": lambda s: s[:-1],
    "braces": lambda s: "{" + s + "}", "quoted": lambda s: '"' + s + '"', "comma": lambda s: s + ",x",
    "backslash": lambda s: s.replace("'", "\\'") + "\\", "zero_width": lambda s: s + "\u200b",
    "nul": lambda s: s + "\x00",
}  # fmt: skip


# --- the corpus ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    key: str
    marker: str
    groups: tuple[str, ...]
    users: tuple[str, ...]


_FIXED_GROUPS = [
    "all-staff", "O'Brien", "zz'] OR 1=1 OR metadata_::jsonb ?| array['y", "'; DROP TABLE rag_nodes; --", "%", "_",
    "50%_off\\path", "--", ";", '{"a":1}', "[ops]", "{eng,hr}", "a,b", "Grüße-グループ-🙂", "1e3", "007", "NULL",
    ("long-Ω-" * 150)[:1000],
]  # fmt: skip
_FIXED_USERS = ["alice", "bob", "O'Hara", "' OR 1=1 --", "ünïcode", "x%", "_", "{alice}", "ALICE"]


def _hostile_name(rng: random.Random) -> str:
    pieces = [rng.choice(HOSTILE_PIECES) for _ in range(rng.randint(1, 4))]
    return "".join(pieces) + rng.choice(string.ascii_lowercase) + str(rng.randint(0, 999))


def make_docs(n_docs: int, n_groups: int, n_users: int, seed: int = 1) -> list[Doc]:
    """Documents with generated ACLs: mostly 1-2 groups, some users, some user-only."""
    rng = random.Random(seed)
    groups = list(_FIXED_GROUPS)
    while len(groups) < n_groups:
        name = _hostile_name(rng)
        if name not in groups:
            groups.append(name)
    users = list(_FIXED_USERS)
    while len(users) < n_users:
        name = _hostile_name(rng)
        if name not in users:
            users.append(name)
    markers: set[str] = set()
    docs = []
    for i in range(n_docs):
        marker = ""
        while not marker or marker in markers:  # same length and distinct: no marker contains another
            marker = "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(6)) + "k"
        markers.add(marker)
        doc_groups = tuple(rng.sample(groups, rng.choice([0, 1, 1, 1, 2, 2]))) if i else ("all-staff",)
        doc_users = tuple(rng.sample(users, rng.choice([0, 0, 0, 1, 2])))
        if not doc_groups and not doc_users:
            doc_users = (rng.choice(users),)
        docs.append(Doc(f"doc{i:03d}", marker, doc_groups, doc_users))
    return docs


@dataclass
class LeakCorpus:
    """The ingested corpus and its oracle."""

    rag: EnterpriseRAG
    docs: dict[str, Doc]  # key -> doc
    key_of: dict[str, str]  # document_id -> key
    node_key: dict[str, str]  # node_id -> key
    question_all: str = ""
    groups: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)

    def visible(self, p: Principal) -> set[str]:
        """The documents ``p`` may read, from the generated ACLs (exact names; empty user id matches nothing)."""
        return {
            k for k, d in self.docs.items() if set(p.groups) & set(d.groups) or (p.user_id and p.user_id in d.users)
        }

    def forbidden_markers(self, p: Principal) -> list[str]:
        allowed = self.visible(p)
        return [d.marker for k, d in self.docs.items() if k not in allowed]

    def leaked_texts(self, p: Principal, texts: list[str]) -> int:
        """How many of ``texts`` carry a marker of a document ``p`` may not read."""
        forbidden = self.forbidden_markers(p)
        return sum(1 for t in texts if any(m in t.lower() for m in forbidden))

    def leaked_nodes(self, p: Principal, nodes: list[NodeWithScore]) -> int:
        """Nodes of a document ``p`` may not read, or carrying such a document's marker."""
        allowed, forbidden = self.visible(p), self.forbidden_markers(p)
        bad = 0
        for n in nodes:
            key = self.key_of.get(str(n.node.metadata.get("document_id")), "?")
            text = n.node.get_content().lower()
            bad += key not in allowed or any(m in text for m in forbidden)
        return bad


def echo_llms(rewrite_to: str) -> tuple[ScriptedLLM, ScriptedLLM]:
    """(generator, grader) that pass everything through: all evidence graded yes, every listed line
    copied as a sentence (so a leaked source would surface in the answer), every sentence judged
    supported, rewrites that ask for every marker."""

    def echo(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, str]:
        return {f"L{n}": text for n, text in prompts.listed_lines(messages).items()}

    generator = ScriptedLLM({"generate": echo, "revise": echo})
    # "standalone": the follow-up rewrite, the same prompt in the workflow and in the retriever
    tasks = {"grade": yes_probability(1.0), "support": yes_probability(1.0), "standalone": rewrite_to,
             "rewrite": rewrite_to, "addressee": written_for_readers}  # fmt: skip
    grader = ScriptedLLM(tasks)
    return generator, grader


def ingest_corpus(dsn: str, data_dir: Path, docs: list[Doc], embed_model: Any, **overrides: Any) -> LeakCorpus:
    """Ingest ``docs`` (one markdown file each, with its own ACL) through the public ``ingest``."""
    question_all = "quarterly policy procedure handbook " + " ".join(d.marker for d in docs)
    generator, grader = echo_llms(question_all[:380].rsplit(" ", 1)[0])  # a rewrite within the retriever's bound
    settings = load_settings(None, database={"dsn": dsn}, workflow={"llm_backoff_s": 0.01}, **overrides)
    rag = EnterpriseRAG(
        data_dir=data_dir, settings=settings, embed_model=CachedQueryEmbedding(embed_model),
        generator=generator, grader=grader,
    )  # fmt: skip
    folder = data_dir.parent / "leak_docs"
    folder.mkdir(parents=True, exist_ok=True)
    for d in docs:
        path = folder / f"{d.key}.md"
        path.write_text(document_text(d.key, d.marker), encoding="utf-8")
        report = rag.ingest([path], allowed_groups=list(d.groups), allowed_users=list(d.users))
        if report.failed:
            raise RuntimeError(f"ingest failed: {report.failed}")
    with psycopg.connect(dsn) as conn:
        key_of = {r[0]: Path(r[1]).stem for r in conn.execute("SELECT document_id, source FROM rag_documents")}
        node_key = {r[0]: key_of[r[1]] for r in conn.execute("SELECT node_id, document_id FROM rag_nodes")}
    return LeakCorpus(
        rag, {d.key: d for d in docs}, key_of, node_key, question_all,
        sorted({g for d in docs for g in d.groups}), sorted({u for d in docs for u in d.users}),
    )  # fmt: skip


# --- probe strategies ---------------------------------------------------------------------------------


def names(real: list[str]) -> st.SearchStrategy[str]:
    """Real ACL names, their near misses, hostile text, very long strings and the empty string."""
    mutated = st.tuples(st.sampled_from(real), st.sampled_from(sorted(MUTATIONS))).map(lambda t: MUTATIONS[t[1]](t[0]))
    return st.one_of(st.sampled_from(real), mutated, hostile_text, very_long_text, st.just(""))


def principals(corpus: LeakCorpus) -> st.SearchStrategy[Principal]:
    return st.builds(Principal, user_id=names(corpus.users), groups=st.lists(names(corpus.groups), max_size=4))


def questions(corpus: LeakCorpus) -> st.SearchStrategy[str]:
    markers = [d.marker for d in corpus.docs.values()]
    fixed = [corpus.question_all, "", "   ", "' OR '1'='1", "%", "_", "\\", "--", ";", '{"a":1} [1,2]',
             "foo & !bar | baz:* <-> (qux", "policy\x00procedure"]  # fmt: skip
    return st.one_of(
        st.sampled_from(fixed),
        st.lists(st.sampled_from(markers), min_size=1, max_size=6).map(" ".join),  # ask for documents by marker
        hostile_text,
        very_long_text,
    )


# --- one checker per path: (corpus, principal, question) -> leaked passages -------------------------------

HISTORY = [{"role": "user", "content": "Tell me about the policies."}, {"role": "assistant", "content": "Sure."}]


def check_retrieve(k: int) -> Callable[[LeakCorpus, Principal, str], int]:
    def run(c: LeakCorpus, p: Principal, q: str) -> int:
        return c.leaked_nodes(p, c.rag.retrieve(q, user=p, top_k=k))

    return run


def check_history(c: LeakCorpus, p: Principal, q: str) -> int:
    """A follow-up: the (scripted) standalone rewrite asks for every document's marker."""
    return c.leaked_nodes(p, c.rag.retrieve(q, user=p, top_k=10, history=HISTORY))


def check_as_retriever(c: LeakCorpus, p: Principal, q: str) -> int:
    retriever = c.rag.as_retriever(p, top_k=10)
    return c.leaked_nodes(p, retriever.retrieve(q)) + c.leaked_nodes(p, asyncio.run(retriever.aretrieve(q)))


def check_rerank_input(c: LeakCorpus, p: Principal, q: str) -> int:
    reranker = RecordingReranker()
    retriever = PermissionScopedRetriever(Retriever(
        db=c.rag.db, embed_model=c.rag.providers.embed_model, settings=c.rag.settings.retrieval, reranker=reranker,
    ), p, top_k=5)  # fmt: skip
    out = retriever.retrieve(q)
    return sum(c.leaked_nodes(p, call) for call in reranker.calls) + c.leaked_nodes(p, out)


_EVERYONE = "everyone-sees-all"


def check_parents_and_windows(c: LeakCorpus, p: Principal, q: str) -> int:
    """Hits of a principal who reads everything, handed to ``p``: parents and section neighbours
    fetched for ``p`` must all be readable by ``p``."""
    everyone = Principal(_EVERYONE, c.groups)
    vec = c.rag.providers.embed_model.get_query_embedding(q) if q.strip() else None
    allowed = c.visible(p)
    with owner_connection(c.rag) as conn:
        hits: list[Hit] = search(conn, everyone, q, vec, SearchParams(candidates=60), "hybrid" if vec else "text")
        if not hits:
            return 0
        parents = fetch_ancestors(conn, p, sorted({h.parent_id for h in hits if h.parent_id}))
        expanded = expand_within_section(conn, p, hits, 100_000)
    bad = sum(1 for node_id in parents if c.node_key[node_id] not in allowed)
    bad += c.leaked_texts(p, [r.text for r in parents.values()])
    added = [i for h in expanded for i in h.extra.get("expanded_with", [])]
    return bad + sum(1 for node_id in added if c.node_key[node_id] not in allowed)


@dataclass
class QueryProbe:
    leaked: int
    trace_id: str


def run_query(c: LeakCorpus, p: Principal, q: str) -> QueryProbe:
    """``rag.query`` with echoing LLMs: leaks counted in the answer, citations, sources and in every
    passage or source put into an LLM prompt during the run."""
    generator, grader = c.rag.providers.generator, c.rag.providers.grader
    before = (len(generator.calls), len(grader.calls))  # type: ignore[attr-defined]
    try:
        res = c.rag.query(q, user=p)
    except PermissionDeniedError:
        if storable_name(p.user_id):
            raise
        return QueryProbe(0, "")  # refused: a user id PostgreSQL cannot store cannot own a trace
    allowed = c.visible(p)
    bad = c.leaked_texts(p, [res.answer])
    bad += sum(1 for cit in res.citations if cit.kind == "corpus" and c.key_of.get(cit.document_id) not in allowed)
    bad += c.leaked_texts(p, [cit.quote for cit in res.citations])
    bad += c.leaked_texts(p, [json.dumps(s, default=str) for s in res.sources])
    calls = generator.calls[before[0] :] + grader.calls[before[1] :]  # type: ignore[attr-defined]
    for name, messages in calls:
        if name == "grade":
            bad += c.leaked_texts(p, [passage_in(messages)])
        if name in ("grade", "generate", "revise", "support"):  # each holds the sources in its system message
            bad += c.leaked_texts(p, list(sources_in(messages).values()))
    return QueryProbe(bad, res.trace_id)


def check_trace(c: LeakCorpus, owner: Principal, trace_id: str, other: Principal) -> int:
    """Another user reads nothing of ``owner``'s trace, by id or in their recent list."""
    store = TraceStore(c.rag.db)
    if not trace_id or other.user_id == owner.user_id:
        return 0
    bad = int(c.rag.trace(trace_id, other) is not None)
    bad += sum(1 for t in store.recent(other, limit=1000) if t["trace_id"] == trace_id)
    return bad


# --- web fallback gating --------------------------------------------------------------------------------

TAVILY_RESULT = {
    "query": "q", "answer": None, "images": [], "response_time": 0.1,
    "results": [{"title": "Leave FAQ", "url": "https://example.org/faq", "content": "Public page.", "score": 0.9}],
}  # fmt: skip


@contextlib.contextmanager
def recorded_tavily() -> Iterator[list[str]]:
    """tavily-python's HTTP answered at the requests transport (the real SDK runs); yields the requested URLs."""
    calls: list[str] = []

    def send(adapter: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, **_: Any) -> Any:
        calls.append(str(request.url))
        body = json.dumps(TAVILY_RESULT).encode()
        raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers={"Content-Type": "application/json"}, status=200,
                                   preload_content=False)  # fmt: skip
        return adapter.build_response(request, raw)

    with mock.patch.object(requests.adapters.HTTPAdapter, "send", send):
        yield calls


def web_rag(c: LeakCorpus, data_dir: Path, egress_groups: list[str]) -> EnterpriseRAG:
    """A second instance on the same store: Tavily fallback for ``egress_groups``, every passage graded no."""
    generator, _ = echo_llms(c.question_all)
    no = {"grade": yes_probability(0.0),
          "support": yes_probability(1.0),
          "rewrite": "leave policy", "standalone": "leave policy", "addressee": written_for_readers}  # fmt: skip
    dsn = c.rag.settings.database.dsn
    assert dsn is not None
    settings = load_settings(
        None, database={"dsn": dsn.get_secret_value()},
        workflow={"llm_backoff_s": 0.01, "max_query_rewrites": 0, "web_phrasings": 1},
        web_search={"provider": "tavily", "api_key": "tvly-test-not-a-key", "egress_groups": egress_groups},
    )  # fmt: skip
    return EnterpriseRAG(data_dir=data_dir, settings=settings, embed_model=c.rag.providers.embed_model,
                         generator=generator, grader=ScriptedLLM(no))  # fmt: skip


def check_web_gate(rag: EnterpriseRAG, calls: list[str], p: Principal, q: str, egress: set[str]) -> tuple[int, bool]:
    """(egress leaks, whether the web was used): a principal outside ``egress`` must send nothing out."""
    before = len(calls)
    try:
        used = bool(rag.query(q, user=p).pipeline["web_search_used"])
    except PermissionDeniedError:
        if storable_name(p.user_id):
            raise
        used = False  # refused before the workflow: a user id PostgreSQL cannot store cannot own a trace
    sent = len(calls) > before
    allowed = bool(egress & set(p.groups))
    return int(sent and not allowed) + int(used and not allowed), sent


# --- delete / re-ingest race -------------------------------------------------------------------------------


@dataclass
class RaceOutcome:
    reads: int = 0
    leaked: int = 0
    writes: int = 0
    seen: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def run_race(c: LeakCorpus, folder: Path, cycles: int, readers: int = 2) -> RaceOutcome:
    """One document flips between two versions (text and ACL change together) and is deleted, while
    readers of each version and an outsider query it. A reader holding only version A's group must
    never see version B's text, and the reverse; the outsider sees nothing of it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "racing.md"
    versions = {"a": ("zqracealphak", ["race-group-a"]), "b": ("zqracebetaxk", ["race-group-b"])}
    who = {"a": Principal("reader-a", ["race-group-a"]), "b": Principal("reader-b", ["race-group-b"]),
           "none": Principal("outsider", ["race-group-c"])}  # fmt: skip
    question = "quarterly policy procedure handbook zqracealphak zqracebetaxk"
    out = RaceOutcome()
    done = threading.Event()
    lock = threading.Lock()

    def read(name: str) -> None:
        p = who[name]
        forbidden = [m for v, (m, _) in versions.items() if v != name]
        try:
            while not done.is_set():
                nodes = c.rag.retrieve(question, user=p, top_k=20)
                texts = [n.node.get_content().lower() for n in nodes]
                bad = sum(1 for t in texts if any(m in t for m in forbidden))
                with lock:
                    out.reads += 1
                    out.leaked += bad
                    for v, (m, _) in versions.items():
                        out.seen[f"{name} saw {v}"] = out.seen.get(f"{name} saw {v}", 0) + any(m in t for t in texts)
        except Exception as exc:  # a reader error is reported, not swallowed
            out.errors.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=read, args=(name,)) for name in who for _ in range(readers)]
    for t in threads:
        t.start()
    try:
        for i in range(cycles):
            version = "a" if i % 2 == 0 else "b"
            marker, groups = versions[version]
            path.write_text(document_text("racing", marker), encoding="utf-8")
            report = c.rag.ingest([path], allowed_groups=groups)
            if report.failed:
                out.errors.append(str(report.failed))
            out.writes += 1
            if i % 3 == 2:
                c.rag.delete(path)
                out.writes += 1
    finally:
        done.set()
        for t in threads:
            t.join()
    return out
