"""Citation check, in code.

Answers are written from sources numbered ``[S1]..[Sn]``. Before the support
check spends an LLM call, this module proves the cheap things: every cited label
exists, every factual unit carries a citation, and every quoted span is really in
a cited source. The report's ``feedback()`` is fed back into a revision prompt.

Rules (strict but fair):

* A unit is a heading, a list item's sentence or a sentence of a plain line;
  lines never merge, paragraphs are separated by blank lines, fenced code is skipped.
* A unit is cited if it holds a citation itself, or the next unit in the same
  paragraph consists only of citations (``Fact. [S1]`` / ``Fact.`` + line ``[S2]``).
* A list item without its own citation is covered when the line introducing the
  list ends with ':' and carries a citation, and the whole item is < 12 words.
* Exempt (need no citation): headings, units ending with ':', units < 4 words,
  citation-only units, not-found statements, "Here is/are ..." wrappers. In an
  answer without any citation that opens with a not-found statement, follow-up
  units are exempt too unless they contain a digit (numbers are the usual invention).
* Quotes ("..." or curly) of >= 3 words must appear, normalised, in one source
  cited by their unit (any source when the unit cites none); '...' splits a quote
  into fragments that must all appear in that one source.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from enterprise_rag.text import word_count

NOT_FOUND_PHRASES: tuple[str, ...] = (
    "could not find",
    "not in the",
    "no information",
    "unable to find",
    "don't have",
    "do not mention",
    "not specified",
    "do not contain",
    "does not contain",
    "not found",
    "not mentioned in",
    "not listed in",
    "not provided in",
    "provide any information",
)

_LABEL = r"[Ss]\s*\d+"
_ITEM_SEP = r"\s*(?:[,;]|[-\u2010-\u2015]|\bto\b)?\s*"
CITATION = re.compile(rf"\[\s*{_LABEL}(?:{_ITEM_SEP}[Ss]?\s*\d+)*\s*\]")
_PART = re.compile(r"([Ss])?\s*(\d+)|([-\u2010-\u2015]|\bto\b)")
_MAX_RANGE = 50  # a typo like [S1-S999] must not explode into a thousand labels

_QUOTES = str.maketrans(
    {c: '"' for c in "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"}
    | {c: "'" for c in "\u2018\u2019\u201a\u201b\u2032"}
    | {c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"}
    | {"\u00ad": None}
)
_ABBREVS = frozenset(
    {
        "e.g",
        "i.e",
        "cf",
        "viz",
        "vs",
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "sr",
        "jr",
        "inc",
        "ltd",
        "corp",
        "co",
        "dept",
        "approx",
        "est",
        "al",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    }
)
_NUMBER_ABBREVS = frozenset({"no", "nos", "p", "pp", "fig", "sec", "art", "vol", "ch", "para"})
_TERMINATOR = re.compile(r"[.!?]+[)\]\"'\u201d\u2019\u00bb]*")
_TRAILING_CITES = re.compile(rf"(?:\s*{CITATION.pattern})+[.!?]?")
_HEADING = re.compile(r"^(?:#{1,6}\s+.*|\*\*[^*]+\*\*:?|__[^_]+__:?)$")
_ITEM = re.compile(r"^(?:[-*+\u2022\u2013]|\d{1,3}[.)])\s+")
_QUOTE_SPAN = re.compile(r"[\"\u201c\u201e]([^\"\u201c\u201d\u201e]{1,600}?)[\"\u201d\u201c]")
_WRAPPER = re.compile(r"^(?:here(?:'s| is| are)|below (?:is|are)|i hope this helps|let me know)\b")
_FILLER = re.compile(r"[\W_]+|\b(?:sources?|see|refs?|references?|cited)\b", re.IGNORECASE)


@dataclass(frozen=True)
class CitationIssue:
    """One reason the answer must be revised."""

    kind: Literal["unknown_label", "uncited_sentence", "quote_not_in_source"]
    detail: str  # the label / the sentence / the quote
    sentence: str


@dataclass(frozen=True)
class CitationReport:
    """Outcome of :func:`check_citations`; ``ok`` means no issues."""

    ok: bool
    issues: tuple[CitationIssue, ...]
    cited_labels: tuple[str, ...]  # distinct *known* labels in order of first use

    def feedback(self, max_lines: int = 8) -> str:
        """Short, actionable lines for a revision prompt (empty when ok)."""
        lines = [_advice(issue) for issue in self.issues[:max_lines]]
        if len(self.issues) > max_lines:
            lines[-1] = f"- ...and {len(self.issues) - max_lines + 1} more issue(s) of the same kinds."
        return "\n".join(lines)


def _advice(issue: CitationIssue) -> str:
    if issue.kind == "unknown_label":
        return f"- [{issue.detail}] is not one of the provided sources; cite only the numbered sources you were given."
    if issue.kind == "uncited_sentence":
        return f'- Add a [S#] citation to "{_clip(issue.detail)}", or remove it if no source supports it.'
    return f'- The quote "{_clip(issue.detail)}" is not in the cited source; quote it verbatim or paraphrase.'


def _clip(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def normalise(text: str) -> str:
    """Compare text the way a reader would: NFKC, casefold, straight quotes, '-' dashes, single spaces."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold().split())


def _canon(label: str) -> str:
    """'s01' and 'S1' are the same source."""
    digits = re.sub(r"\D", "", label)
    return f"S{int(digits)}" if digits else label.strip().upper()


def _expand(citation: str) -> list[str]:
    """Labels of one bracket, ranges expanded: '[S1-S3]' -> S1, S2, S3."""
    out: list[int] = []
    pending_range = False
    for m in _PART.finditer(citation):
        if m.group(3):
            pending_range = bool(out)
            continue
        n = int(m.group(2))
        if pending_range and out and 0 < n - out[-1] <= _MAX_RANGE:
            out.extend(range(out[-1] + 1, n + 1))
        else:
            out.append(n)
        pending_range = False
    return [f"S{n}" for n in out]


def _unique(labels: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(labels))


def drop_uncited(answer: str, report: CitationReport) -> str:
    """The answer without its uncited sentences (for a draft that may not be revised)."""
    for issue in report.issues:
        if issue.kind == "uncited_sentence":
            answer = answer.replace(issue.sentence, "", 1)
    return "\n".join(re.sub(r"[ \t]{2,}", " ", line).strip() for line in answer.split("\n")).strip()


def cited_labels(text: str) -> list[str]:
    """Distinct labels ('S1', ...) in order of first use."""
    return _unique(label for m in CITATION.finditer(text) for label in _expand(m.group()))


def strip_citations(text: str) -> str:
    """Remove citation brackets and tidy the spaces they leave before punctuation."""
    text = CITATION.sub("", text)
    text = re.sub(r"[ \t]+([.,;:!?)\]])", r"\1", text)
    text = re.sub(r"([(\[])[ \t]+", r"\1", text)
    return "\n".join(re.sub(r"[ \t]{2,}", " ", line).strip() for line in text.split("\n"))


def _words(text: str) -> int:
    return word_count(strip_citations(text))


def _is_abbrev(before: str, next_char: str) -> bool:
    """Whether the '.' ending ``before`` belongs to an abbreviation, not a sentence end."""
    m = re.search(r"([A-Za-z][A-Za-z.]*)$", before)
    if not m:
        return False
    token = m.group(1)
    low = token.lower()
    if low in _ABBREVS or "." in token or (len(token) == 1 and token.isupper()):
        return True
    return low in _NUMBER_ABBREVS and next_char.isdigit()


def split_line(line: str) -> list[str]:
    """Sentences of one line; trailing citations stay with the sentence they follow."""
    out: list[str] = []
    start = 0
    for m in _TERMINATOR.finditer(line):
        if m.start() < start:
            continue
        end = m.end()
        seg = line[start:end]
        trailing = _TRAILING_CITES.match(line, end)
        if trailing:
            end = trailing.end()
        rest = line[end:]
        nxt = rest.lstrip()[:1]
        if not rest[:1].isspace() or not nxt or not (nxt.isupper() or nxt.isdigit() or nxt in '"\u201c(*_['):
            continue
        if seg.count('"') % 2 or seg.count("\u201c") > seg.count("\u201d"):
            continue  # the terminator is inside a quotation
        if line[m.start()] == "." and _is_abbrev(line[start : m.start()], nxt):
            continue
        out.append(line[start:end].strip())
        start = end
    if line[start:].strip():
        out.append(line[start:].strip())
    return out


@dataclass(frozen=True)
class _Unit:
    text: str
    para: int
    line: int
    kind: Literal["heading", "item", "text"]
    last_in_line: bool
    line_words: int


def _units(text: str) -> list[_Unit]:
    units: list[_Unit] = []
    para, in_code = 0, False
    for line_no, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        if not line:
            para += 1
            continue
        line = re.sub(r"^(?:>\s*)+", "", line)
        kind: Literal["heading", "item", "text"] = "text"
        if _HEADING.match(line):
            kind, parts = "heading", [line.lstrip("#").strip()]
        else:
            if _ITEM.match(line):
                kind, line = "item", _ITEM.sub("", line, count=1)
            parts = split_line(line)
        for i, part in enumerate(parts):
            units.append(_Unit(part, para, line_no, kind, i == len(parts) - 1, _words(line)))
    return units


def split_sentences(text: str) -> list[str]:
    """Answer-aware units: lines and list items never merge; abbreviations/decimals/codes never split."""
    return [u.text for u in _units(text)]


def states_not_found(text: str) -> bool:
    """Whether ``text`` says the sources lack the answer ("I could not find ...", "... is not mentioned in ...")."""
    normalised = normalise(text)
    return any(p in normalised for p in NOT_FOUND_PHRASES)


def says_nothing(text: str) -> bool:
    """Nothing but citation labels, punctuation and words like "see sources" (or nothing at all)."""
    return not _FILLER.sub("", CITATION.sub("", text))


def _citation_only(text: str) -> bool:
    return bool(CITATION.search(text)) and says_nothing(text)


def _is_intro(text: str) -> bool:
    return strip_citations(text).rstrip().endswith(":")


def _quote_fragments(quote: str) -> list[str]:
    parts = re.split(r"\.\.\.|\u2026", normalise(strip_citations(quote)))
    return [f for p in parts if (f := p.strip(" .,;:!?'\"-"))]


def check_citations(
    answer: str, sources: Mapping[str, str], *, not_found_phrases: Sequence[str] = NOT_FOUND_PHRASES
) -> CitationReport:
    """Check labels, per-unit citation coverage and quotes of one answer against its numbered sources."""
    known = {_canon(k): normalise(v) for k, v in sources.items()}
    phrases = [normalise(p) for p in not_found_phrases]
    units = _units(answer)
    issues: list[CitationIssue] = []
    reported: set[str] = set()

    def not_found(text: str) -> bool:
        return any(p in normalise(text) for p in phrases)

    content = [u for u in units if u.kind != "heading"]
    refusal = not CITATION.search(answer) and bool(content) and not_found(content[0].text)
    list_labels: list[str] | None = None  # labels of the intro line of the list being read
    used: list[str] = []

    for i, unit in enumerate(units):
        own = cited_labels(unit.text)
        for label in own:
            if label not in known and label not in reported:
                reported.add(label)
                issues.append(CitationIssue("unknown_label", label, unit.text))
        used.extend(label for label in own if label in known)

        if unit.kind != "item" and (i == 0 or units[i - 1].line != unit.line):
            list_labels = None  # a plain line or heading ends the list context
        nxt = units[i + 1] if i + 1 < len(units) else None
        cover = own
        if not cover and nxt is not None and nxt.para == unit.para and _citation_only(nxt.text):
            cover = cited_labels(nxt.text)
        if not cover and unit.kind == "item" and list_labels and unit.line_words < 12:
            cover = list_labels
        if unit.last_in_line and _is_intro(unit.text) and (own or unit.kind != "item"):
            list_labels = own  # an uncited nested intro keeps the outer list's coverage

        exempt = (
            unit.kind == "heading"
            or _is_intro(unit.text)
            or _words(unit.text) < 4
            or _citation_only(unit.text)
            or not_found(unit.text)
            or bool(_WRAPPER.match(normalise(unit.text)) and _words(unit.text) <= 8)
            or (refusal and not re.search(r"\d", strip_citations(unit.text)))
        )
        if not cover and not exempt:
            issues.append(CitationIssue("uncited_sentence", unit.text, unit.text))

        pool = [known[label] for label in cover if label in known] or list(known.values())
        for m in _QUOTE_SPAN.finditer(unit.text):
            quote = m.group(1).strip()
            frags = _quote_fragments(quote)
            if sum(word_count(f) for f in frags) < 3:
                continue
            if not any(all(f in src for f in frags) for src in pool):
                issues.append(CitationIssue("quote_not_in_source", quote, unit.text))

    return CitationReport(ok=not issues, issues=tuple(issues), cited_labels=tuple(_unique(used)))
