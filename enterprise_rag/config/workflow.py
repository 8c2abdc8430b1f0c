"""The answer workflow's settings: its bounds, and the thresholds fitted per model by the benchmarks."""

from __future__ import annotations

from pydantic import Field, field_validator

from enterprise_rag.config.section import Section

# Fitted by benchmarks/grading.py (local grader, pooled dev scenarios + SciFact; see that script's docstring).
FITTED_GRADE_THRESHOLDS: dict[str, tuple[float, float]] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": (0.4, 0.5)}
# MiniLM similarities (the local int8 model): under 0.12, passages were almost never relevant.
FITTED_GRADE_FLOORS: dict[str, float] = {"all-MiniLM-L6-v2-onnx-int8": 0.12}
# benchmarks/grounding.py on the dev documents: the threshold maximising the worst of faithful claims accepted
# and each perturbed family rejected (0.88 there; held out on the public documents, faithful 43/49 accepted).
FITTED_SUPPORT_THRESHOLDS: dict[str, float] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": 0.658}
# benchmarks/addressee.py on the dev documents, each paragraph (a list whole) alone: planted paragraphs 3/4 set
# aside, others 52/52 kept (held out on the public documents: 1/1 and 21/21).
FITTED_ADDRESSEE_THRESHOLDS: dict[str, float] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": -0.177}
DEFAULT_COMPENSATIONS = ("question_codes",)


class WorkflowSettings(Section):
    """Bounds and thresholds of the corrective answer workflow (every loop has a cap)."""

    max_sources: int = Field(4, ge=1, le=20, description="Sources given to the generator at most.")
    grade_thresholds: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: dict(FITTED_GRADE_THRESHOLDS),
        description="Per grader model name (as the model reports it, e.g. llm.grader.model): the (partial, yes)"
        " thresholds on its probability of answering 'yes' (p(yes) >= yes: yes; >= partial: partial; else no)."
        " The local model's were fitted by benchmarks/grading.py on the dev scenarios and SciFact.",
    )
    grade_thresholds_fallback: tuple[float, float] = Field(
        (0.1, 0.5),
        description="(partial, yes) for a grader model not in grade_thresholds: yes where the model's own"
        " choice is yes, partial down to a tenth (an uncalibrated model keeps doubtful passages).",
    )
    grade_floor: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_GRADE_FLOORS),
        description="Per embedding model name (as the model reports it): the dense similarity under which a"
        " passage is rejected without an LLM call. A model not listed has no floor (similarities are not"
        " comparable across models).",
    )
    min_yes: int = Field(1, ge=1, description="Passages graded yes needed to proceed without correction.")
    max_query_rewrites: int = Field(2, ge=0, le=5, description="Rewrite-and-retrieve rounds before web fallback.")
    max_revisions: int = Field(1, ge=0, le=5, description="Revisions of the sentences that failed verification.")
    link_allow_list: list[str] = Field(
        default_factory=list,
        description="Web hosts (e.g. intranet.example, subdomains included) an answer may link to though no cited"
        " source gives the link. Any other URL or e-mail address in an answer must be given by a cited source.",
    )
    refine_floor: float = Field(
        0.1, ge=-1, le=1, description="Strips below this similarity and sharing no word with the question are dropped."
    )
    answer_max_tokens: int = Field(
        640, ge=32, description="Tokens for an answer (a cap: a list answer cut off at 320 lost its last items)."
    )
    evidence_units: int = Field(
        8,
        ge=1,
        le=32,
        description="Evidence units (a line, a table row, a whole list) of the sources put to the"
        " grader per round, the best by rank.",
    )
    max_evidence: int = Field(6, ge=1, le=20, description="Graded evidence units an answer is written from at most.")
    evidence_margin: float = Field(
        0.05, ge=0, le=1, description="Evidence units within this much of the best p(yes) are written from."
    )
    web_phrasings: int = Field(3, ge=1, le=5, description="Query phrasings searched on a full web fallback.")
    web_confidence_cap: float = Field(
        0.5, ge=0, le=1, description="Highest confidence of an answer resting on web sources with weak corpus hits."
    )
    support_thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_SUPPORT_THRESHOLDS),
        description="Per judge model name: the p(yes) at which a claim counts as stated by its lines."
        " The local model's was fitted by benchmarks/grounding.py on the dev scenarios.",
    )
    support_threshold_fallback: float = Field(0.5, ge=0, le=1, description="The same for a model not listed.")
    addressee_thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_ADDRESSEE_THRESHOLDS),
        description="Per grader model name: the score (p(yes) written to an AI model less p(yes) written for its"
        " readers) at which a paragraph of evidence is set aside. Fitted by benchmarks/addressee.py.",
    )
    addressee_threshold_fallback: float = Field(0.0, ge=-1, le=1, description="The same for a model not listed.")
    web_support_margin: float = Field(
        0.2, ge=0, le=1, description="Added to the support threshold for claims resting on web sources (stricter)."
    )
    compensations: list[str] = Field(
        default_factory=lambda: list(DEFAULT_COMPENSATIONS),
        description="Small-model aids switched on (enterprise_rag.answer.compensations; see docs/answers.md for"
        " what each does and its measured effect).",
    )
    llm_timeout_s: float = Field(240.0, gt=0, description="Seconds before one LLM call is abandoned and retried.")
    llm_max_retries: int = Field(2, ge=0, le=5, description="Retries of a failed LLM call, with backoff.")
    llm_backoff_s: float = Field(1.0, ge=0, description="First backoff between retries (doubles each time).")

    @field_validator("grade_thresholds_fallback")
    @classmethod
    def _check_fallback(cls, value: tuple[float, float]) -> tuple[float, float]:
        return _ordered_thresholds("fallback", value)

    @field_validator("grade_thresholds")
    @classmethod
    def _check_thresholds(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        return {model: _ordered_thresholds(model, pair) for model, pair in value.items()}

    def grade_thresholds_for(self, model: str) -> tuple[float, float]:
        """(partial, yes) thresholds on p(yes) for this grader model; the fallback for a model not listed."""
        return self.grade_thresholds.get(model, self.grade_thresholds_fallback)

    def support_threshold_for(self, model: str) -> float:
        """The p(yes) threshold of claim support for this judge model; the fallback for a model not listed."""
        return self.support_thresholds.get(model, self.support_threshold_fallback)

    def addressee_threshold_for(self, model: str) -> float:
        """The score at which a paragraph of evidence counts as written to an AI model, for this grader model."""
        return self.addressee_thresholds.get(model, self.addressee_threshold_fallback)

    def grade_floor_for(self, model: str) -> float | None:
        """The dense-similarity floor for this embedding model; None (no floor) for a model not listed."""
        return self.grade_floor.get(model)


def _ordered_thresholds(model: str, pair: tuple[float, float]) -> tuple[float, float]:
    partial, yes = pair
    if not 0.0 <= partial <= yes <= 1.0:
        raise ValueError(f"grade thresholds of {model}: need 0 <= partial <= yes <= 1, got {pair}")
    return (float(partial), float(yes))
