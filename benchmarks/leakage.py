"""Permission leak benchmark: thousands of generated hostile probes over every path; leaks per 1,000 probes.

The harness of tests/security/ (tests/security/harness.py) at full size: a generated
corpus (each document with its own ACL of hostile group and user names and a unique
marker token), ingested through the public API with the real local embedding model into
a fresh embedded PostgreSQL; principals and questions drawn by hypothesis from hostile
alphabets and near misses of the real names; the oracle computed in Python from the ACLs.
A leaked passage is any returned node, citation, prompt passage or text carrying a
document the principal may not read (for the web gate: a question sent out by a principal
outside the egress groups; for traces: another user's trace returned).

Then the second wall as an insider tries it (tests/security/wall.py), for principals of real
names: planner estimates of right and wrong guesses via EXPLAIN, settings widened within one
statement, the term oracle, score differentials when unreadable documents come and go, and
another store's database on the same server; per family, probes, bits recovered, rows beyond.

    .venv/bin/python benchmarks/leakage.py [--docs 80] [--probes 1000] [--query-probes 200]
                                           [--web-probes 200] [--race-cycles 30] [--wall-principals 20]

Must print 0 leaked passages on every path, and 0 bits and 0 rows beyond in every family.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from _common import temp_data_dir
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness lives with the tests

from enterprise_rag import EnterpriseRAG  # noqa: E402
from enterprise_rag.config import load_settings  # noqa: E402
from enterprise_rag.providers.local_embedding import LocalMiniLMEmbedding  # noqa: E402
from enterprise_rag.store.embedded import start_embedded, stop_embedded  # noqa: E402
from tests.security import harness, wall  # noqa: E402


class Tally:
    """Probes and leaked passages per path, and time spent."""

    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = {}

    def add(self, path: str, leaked: int, seconds: float, probes: int = 1) -> None:
        row = self.rows.setdefault(path, [0, 0, 0.0])
        row[0] += probes
        row[1] += leaked
        row[2] += seconds

    def timed(self, path: str, fn: Callable[[], int]) -> None:
        t0 = time.perf_counter()
        leaked = fn()
        self.add(path, leaked, time.perf_counter() - t0)

    def print(self) -> None:
        print(f"{'path':<34} {'probes':>7} {'leaked':>7} {'per 1,000 probes':>17} {'ms/probe':>9}")
        total_probes = total_leaked = 0
        for path, (probes, leaked, seconds) in self.rows.items():
            total_probes += int(probes)
            total_leaked += int(leaked)
            rate = 1000 * leaked / probes if probes else 0.0
            print(f"{path:<34} {int(probes):>7} {int(leaked):>7} {rate:>17.2f} {1000 * seconds / max(probes, 1):>9.0f}")
        rate = 1000 * total_leaked / total_probes if total_probes else 0.0
        print(f"{'total':<34} {total_probes:>7} {total_leaked:>7} {rate:>17.2f}")


def run_generated(n: int, strategy: st.SearchStrategy[Any], probe: Callable[[Any], None]) -> None:
    """Run ``probe`` on ``n`` hypothesis-generated examples (no shrinking: we count, we do not stop)."""

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def run(example: Any) -> None:
        probe(example)

    run()


def insider_families(corpus: harness.LeakCorpus, server: str, root: Path, n: int) -> dict[str, wall.Family]:
    """Every family of tests/security/wall.py for ``n`` principals of real names; a second store for the last."""
    principals = wall.real_principals(corpus, n)
    t0 = time.perf_counter()
    out = {
        "estimates via EXPLAIN": wall.estimates(corpus, principals),
        "settings changed mid-statement": wall.mid_statement(corpus, principals),
        "term oracle": wall.term_oracle(corpus, principals),
        "score differential": wall.score_differential(corpus, principals, root / "differential"),
    }
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "leakage_other"')
    other = EnterpriseRAG(data_dir=root / "other", settings=load_settings(None, database={
        "dsn": psycopg.conninfo.make_conninfo(server, dbname="leakage_other")}))  # fmt: skip
    doc = root / "other.md"
    doc.write_text("---\ntitle: Payroll\n---\n\nThe other store's payroll runs on the ninth.\n", encoding="utf-8")
    other.ingest([doc], allowed_groups=["payroll"])
    out["another store's database"] = wall.cross_database(corpus, other)
    other.close()
    print(f"insider families: {len(principals)} principals, {time.perf_counter() - t0:.0f} s")
    return out


def print_families(families: dict[str, wall.Family]) -> None:
    print(f"{'family':<34} {'probes':>7} {'bits recovered':>15} {'rows beyond':>12}")
    for name, f in families.items():
        print(f"{name:<34} {f.probes:>7} {f.bits:>15} {f.rows_beyond:>12}")
        for example in f.examples or []:
            print(f"  e.g. {example[:160]}")
    total = [sum(getattr(f, a) for f in families.values()) for a in ("probes", "bits", "rows_beyond")]
    print(f"{'wall total':<34} {total[0]:>7} {total[1]:>15} {total[2]:>12}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=80)
    parser.add_argument("--groups", type=int, default=60)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--probes", type=int, default=1000, help="generated probes over the retrieval paths")
    parser.add_argument("--query-probes", type=int, default=200, help="generated rag.query probes (with traces)")
    parser.add_argument("--web-probes", type=int, default=200)
    parser.add_argument("--race-cycles", type=int, default=30)
    parser.add_argument("--wall-principals", type=int, default=20, help="principals per insider probe family")
    args = parser.parse_args()

    root = temp_data_dir("erag-leak-")
    server = start_embedded(root / "server")
    try:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "leakage"')
        dsn = psycopg.conninfo.make_conninfo(server, dbname="leakage")
        t0 = time.perf_counter()
        docs = harness.make_docs(args.docs, args.groups, args.users, seed=2026)
        corpus = harness.ingest_corpus(dsn, root / "data", docs, LocalMiniLMEmbedding())
        print(f"corpus: {len(docs)} documents, {len(corpus.groups)} groups, {len(corpus.users)} users, "
              f"{len(corpus.node_key)} nodes (ingested in {time.perf_counter() - t0:.0f} s)")  # fmt: skip
        tally = Tally()
        retrieval: dict[str, Callable[[harness.LeakCorpus, Any, str], int]] = {
            "retrieve k=1": harness.check_retrieve(1),
            "retrieve k=5": harness.check_retrieve(5),
            "retrieve k=50": harness.check_retrieve(50),
            "retrieve with history (rewrite)": harness.check_history,
            "as_retriever (sync+async)": harness.check_as_retriever,
            "rerank input": harness.check_rerank_input,
            "parents + section windows": harness.check_parents_and_windows,
        }

        def retrieval_probe(example: Any) -> None:
            p, q = example
            for path, check in retrieval.items():
                tally.timed(path, lambda check=check: check(corpus, p, q))

        run_generated(args.probes, st.tuples(harness.principals(corpus), harness.questions(corpus)), retrieval_probe)

        def query_probe(example: Any) -> None:
            p, q, other = example
            t1 = time.perf_counter()
            result = harness.run_query(corpus, p, q)
            tally.add("query: answer, citations, prompts", result.leaked, time.perf_counter() - t1)
            t1 = time.perf_counter()
            leaked = harness.check_trace(corpus, p, result.trace_id, other)
            # The owner must still read it; a refused query (a user id that cannot own a trace) has none.
            unreadable = bool(result.trace_id) and corpus.rag.trace(result.trace_id, p) is None
            if leaked or unreadable:  # say which, for whom: a count alone cannot be debugged
                print(
                    f"  trace probe failed: other read={leaked} owner cannot read={unreadable} owner={p!r} "
                    f"other={other!r} question={q[:80]!r} trace_id={result.trace_id!r}",
                    flush=True,
                )
            tally.add("traces: other users", leaked + unreadable, time.perf_counter() - t1)

        strategy = st.tuples(harness.principals(corpus), harness.questions(corpus), harness.principals(corpus))
        run_generated(args.query_probes, strategy, query_probe)

        egress = [corpus.groups[1], corpus.groups[5]]
        web = harness.web_rag(corpus, root / "web-data", egress)
        sent_out = 0

        def web_probe(example: Any) -> None:
            nonlocal sent_out
            p, q = example
            t1 = time.perf_counter()
            with harness.recorded_tavily() as calls:
                leaked, sent = harness.check_web_gate(web, calls, p, q, set(egress))
            sent_out += sent
            tally.add("web fallback egress gate", leaked, time.perf_counter() - t1)

        run_generated(args.web_probes, st.tuples(harness.principals(corpus), harness.questions(corpus)), web_probe)
        web.close()

        families = insider_families(corpus, server, root, args.wall_principals)  # before the race adds documents

        t1 = time.perf_counter()
        race = harness.run_race(corpus, root / "race", cycles=args.race_cycles, readers=2)
        if race.errors:
            raise SystemExit(f"race readers failed: {race.errors[:3]}")
        race_tally = Tally()
        race_tally.add("delete/re-ingest race (reads)", race.leaked, time.perf_counter() - t1, probes=race.reads)

        print("\ngenerated probes (hypothesis), per path:")
        tally.print()
        print("\nconcurrent reads while one document is re-ingested under a new ACL or deleted:")
        race_tally.print()
        print()
        print(f"web probes that were allowed out and sent a question: {sent_out} of {args.web_probes} "
              f"(egress groups: {len(egress)})")  # fmt: skip
        print(f"race: {race.writes} writes (re-ingest with a new ACL, or delete), {race.reads} concurrent reads; "
              f"own version seen: {dict(sorted(race.seen.items()))}")  # fmt: skip
        print("\nthe second wall as an insider tries it (SQL in a signed read, searches shaped to measure):")
        print_families(families)
        corpus.rag.close()
    finally:
        stop_embedded(root / "server")


if __name__ == "__main__":
    main()
