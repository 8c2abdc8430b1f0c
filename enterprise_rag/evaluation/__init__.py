"""Retrieval evaluation: labelled sets, ranking metrics and a harness that runs a retriever over them.

>>> from enterprise_rag.evaluation import EvalSet, evaluate
>>> evalset = EvalSet(queries={"q1": "refund window?"}, qrels={"q1": {"refunds.md": 1}})
>>> report = evaluate(lambda question: ["faq.md", "refunds.md"], evalset, ks=(1, 2))
>>> report.metrics["recall@1"], report.metrics["recall@2"], report.metrics["mrr@10"]
(0.0, 1.0, 0.5)
"""

from enterprise_rag.evaluation.dataset import (
    CorpusRecord,
    EvalDataError,
    EvalSet,
    iter_beir_corpus,
    load_beir,
    load_labelled_yaml,
)
from enterprise_rag.evaluation.metrics import mrr, ndcg_at_k, precision_at_k, recall_at_k, unique_in_order
from enterprise_rag.evaluation.runner import (
    DEFAULT_KS,
    EvalReport,
    QueryResult,
    Retrieve,
    compare_table,
    evaluate,
    evaluate_as_users,
    evaluate_scopes,
    plot_recall_curve,
)

__all__ = [
    "DEFAULT_KS",
    "CorpusRecord",
    "EvalDataError",
    "EvalReport",
    "EvalSet",
    "QueryResult",
    "Retrieve",
    "compare_table",
    "evaluate",
    "evaluate_as_users",
    "evaluate_scopes",
    "iter_beir_corpus",
    "load_beir",
    "load_labelled_yaml",
    "mrr",
    "ndcg_at_k",
    "plot_recall_curve",
    "precision_at_k",
    "recall_at_k",
    "unique_in_order",
]
