"""How often a retrieved passage is relevant, by its dense similarity to the question (SciFact test).

Calibrates ``workflow.grade_keep_similarity``: the similarity at or above which a
grader "no" is doubted and the passage kept as partial. The passages are those
the answer workflow grades (top 5 of hybrid retrieval with merging, as
configured); relevance comes from the SciFact qrels, which are sparse (an
unjudged passage counts as not relevant, so the shares are lower bounds).

    .venv/bin/python benchmarks/grade_similarity.py [--store-dir DIR]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from _common import SCIFACT, temp_data_dir
from retrieval import PUBLIC, scifact_rag

from enterprise_rag.evaluation import load_beir
from enterprise_rag.store.embedded import start_embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store-dir", type=Path, default=None, help="keeps the ingested SciFact store between runs")
    args = parser.parse_args()
    store_dir = args.store_dir or temp_data_dir("erag-bench-grade-similarity-")
    store_dir.mkdir(parents=True, exist_ok=True)
    rag = scifact_rag(start_embedded(store_dir), store_dir / "data")
    evalset = load_beir(SCIFACT)
    top_k = rag.settings.workflow.top_k
    relevant: Counter[float] = Counter()
    total: Counter[float] = Counter()
    for qid, question in evalset.queries.items():
        judged = {doc for doc, grade in evalset.qrels.get(qid, {}).items() if grade > 0}
        for node in rag.retrieve(question, user=PUBLIC, top_k=top_k):
            similarity = node.node.metadata.get("similarity")
            if similarity is None:  # a full-text-only hit: no dense similarity to doubt a grade with
                continue
            band = min(int(similarity * 10), 9) / 10
            total[band] += 1
            relevant[band] += node.node.metadata.get("document_id") in judged
    print(f"{len(evalset.queries)} SciFact test questions, top {top_k} passages each (hybrid, as configured)")
    print(f"{'similarity':>12} {'passages':>9} {'relevant':>9} {'share':>6} {'share at or above':>18}")
    for band in sorted(total, reverse=True):
        above = [b for b in total if b >= band]
        at_or_above = sum(relevant[b] for b in above) / sum(total[b] for b in above)
        print(f"{band:5.1f}-{band + 0.1:<5.1f} {total[band]:9} {relevant[band]:9} {relevant[band] / total[band]:6.2f}"
              f" {at_or_above:18.2f}")  # fmt: skip
    rag.close()


if __name__ == "__main__":
    main()
