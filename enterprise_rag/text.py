"""How the package cuts text into words: the one tokenizer module, with the one stop-word list.

Different needs get different, named cuts, each for what it is compared with:

* :func:`words` and :func:`terms` (runs of letters and digits) for word overlap: the quote a
  citation shows, citation repair, grounding and coverage of answers, the curated web search's
  BM25 terms; :func:`terms` without stop words and with the plural ``-s`` folded.
* :func:`query_words` keeps codes, decimals and contractions whole (``ab-123``, ``2.5``,
  ``don't``): the full-text half of hybrid search parses exactly these into lexemes, and the
  overlap checks that must match a code as one word compare them.
* :func:`identifiers`: the codes a text names, which context refinement matches between a
  question and the headings of a passage; :func:`is_heading` finds those heading lines.
* :func:`contact_points`: the web addresses and e-mail addresses a text gives, and
  :func:`coined_names` its one-word made-up names (``Tulip-Hammer``, ``SecureLink``), which an
  answer, like codes, may only pass on from its sources.
* :func:`word_count`: how long a sentence is, as a reader counts it.
* :func:`split_line`: the sentences of one line of text, where abbreviations, decimals, codes and
  quotations never end a sentence.
* :data:`LIST_ITEM`: a line that starts a list item (a bullet, ``1.``, ``a)``, ``(i)``...), the one
  pattern of the readers, the chunker, the evidence units and the checks of a draft; Markdown's own
  grammar keeps CommonMark's rule (``ingest/readers/markdown.py``).
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"\w[\w.\-/]*\w|\w", re.UNICODE)
_HEADING = re.compile(r"^\s*#{1,6}\s")
_QUERY_WORD = re.compile(r"[\w][\w.\-']*[\w]|[\w]", re.UNICODE)
_MAX_QUERY_WORDS = 64
_CONTACT_POINT = re.compile(
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # an e-mail address
    r"|(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<>()\[\]\"']+",  # a URL with a scheme, or www.
    re.IGNORECASE,
)
LIST_ITEM = re.compile(
    r"^(\s*)(?:[-*+\u2022\u25aa\u25e6\u2023\u2013]|\d{1,3}[.)]|[a-zA-Z][.)]|\(\d{1,3}\)|\([a-z]\))\s+(?=\S)"
)
"""A list item's first line: group 1 is its indent; the match ends where the item's text begins."""
_COINED = re.compile(r"\b(?:[A-Z][a-z]+(?:-[A-Z][a-z0-9]+)+|[A-Za-z]*[a-z][A-Z][A-Za-z]*)\b")
STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "in",
        "is", "it", "my", "of", "on", "or", "our", "the", "this", "that", "to", "was", "we", "what", "when",
        "where", "which", "who", "why", "will", "with",
    }
)  # fmt: skip


def words(text: str) -> list[str]:
    """Every run of letters and digits of ``text``, lower case, in order (``AB-123`` gives ``ab``, ``123``)."""
    return _WORD.findall(text.lower())


def terms(text: str) -> list[str]:
    """Content words: :func:`words` without stop words, plural ``-s`` folded (``policies`` stays ``policies``)."""
    out = []
    for word in words(text):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "ies")):
            word = word[:-1]
        out.append(word)
    return out


def query_words(text: str) -> list[str]:
    """Distinct words of ``text`` in order of first use, lower case, at most 64, codes, decimals and
    contractions kept whole (``ab-123``, ``2.5``, ``don't``). The full-text half of hybrid search passes
    exactly these to PostgreSQL to be parsed into lexemes, so this cut decides which rows it finds."""
    seen: dict[str, None] = {}
    for word in _QUERY_WORD.findall(text.lower()):
        seen.setdefault(word, None)
    return list(seen)[:_MAX_QUERY_WORDS]


def identifiers(text: str) -> set[str]:
    """Tokens of ``text`` mixing letters and digits (ab-123, x-7, iso27001), lower case: codes that
    embeddings barely tell from their neighbours (a code one character away). Plain numbers and dates
    are not identifiers."""
    return {t for t in _TOKEN.findall(text.lower()) if any(c.isdigit() for c in t) and any(c.isalpha() for c in t)}


def is_heading(line: str) -> bool:
    """A Markdown heading line, as chunk texts keep them (``## AB-123 - Title``)."""
    return _HEADING.match(line) is not None


def contact_points(text: str) -> set[str]:
    """The e-mail addresses and URLs of ``text``, lower case, without the punctuation that ends a sentence.

    >>> sorted(contact_points("Mail IT@Corp.example or see https://corp.example/vpn."))
    ['https://corp.example/vpn', 'it@corp.example']
    """
    return {m.rstrip(".,;:!?").lower() for m in _CONTACT_POINT.findall(text)}


def coined_names(text: str) -> set[str]:
    """Names of ``text`` coined as one word, lower case: capitalised hyphenated compounds and words with an
    inner capital. Like codes they name one thing (a network, a product, a passphrase).

    >>> sorted(coined_names("Join Harbour-Guest with SecureLink, not the e-mail or Wi-fi."))
    ['harbour-guest', 'securelink']
    """
    return {m.lower() for m in _COINED.findall(text)}


_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"), "-")
_APOSTROPHES = dict.fromkeys(map(ord, "\u2018\u2019\u201a\u201b\u2032`"), "'")
_SEQUENCE_WORD = re.compile(r"[^\W_]+(?:['.,:/-][^\W_]+)*")


def word_sequence(text: str) -> str:
    """``text`` as its words, lower case, single-spaced and padded, dashes and apostrophes folded (codes,
    decimals and contractions kept whole): how evidence is compared to a source."""
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_APOSTROPHES).casefold()
    return f" {' '.join(_SEQUENCE_WORD.findall(text))} "


def word_count(text: str) -> int:
    """Whitespace-separated tokens of ``text`` holding a letter or digit (``AB-123``, ``2.5%`` count once)."""
    return sum(1 for token in text.split() if any(ch.isalnum() for ch in token))


_ABBREVS = frozenset(
    {
        "e.g", "i.e", "cf", "viz", "vs", "mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "inc", "ltd", "corp",
        "co", "dept", "approx", "est", "al", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
        "oct", "nov", "dec",
    }
)  # fmt: skip
_NUMBER_ABBREVS = frozenset({"no", "nos", "p", "pp", "fig", "sec", "art", "vol", "ch", "para"})
_TERMINATOR = re.compile(r"[.!?]+[)\]\"'\u201d\u2019\u00bb]*")


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


def split_line(line: str, keep_after: re.Pattern[str] | None = None) -> list[str]:
    """The sentences of one line, stripped; text matching ``keep_after`` right after a sentence's end (an
    answer's citation labels) stays with that sentence. A sentence ends at ``.``, ``!`` or ``?`` followed
    by a space and a capital, digit, quote or bracket, unless it ends an abbreviation or sits inside a
    quotation."""
    out: list[str] = []
    start = 0
    for m in _TERMINATOR.finditer(line):
        if m.start() < start:
            continue
        end = m.end()
        seg = line[start:end]
        trailing = keep_after.match(line, end) if keep_after is not None else None
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
