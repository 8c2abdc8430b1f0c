"""ACL names: one validator for every write path; a single string is one name, bad names are refused."""

from __future__ import annotations

import pytest

from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import MAX_NAME_BYTES, acl_names


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        ([], []),
        ("finance", ["finance"]),
        (("hr", "finance", "hr"), ["finance", "hr"]),
        (["O'Brien", " eng", "Grüße-🙂"], [" eng", "Grüße-🙂", "O'Brien"]),  # kept exactly: matching is exact
        (["é" * (MAX_NAME_BYTES // 2)], ["é" * (MAX_NAME_BYTES // 2)]),
    ],
)
def test_acl_names_accepts_one_name_or_a_list(value: object, expected: list[str]) -> None:
    assert acl_names(value, "allowed_groups", "hr/pay.md") == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (5, ["list of names", "5"]),
        ({"hr": True}, ["list of names"]),
        (["hr", 5], ["list of names", "5"]),
        (["hr", None], ["list of names"]),
        ("", ["empty"]),
        (["hr", ""], ["empty"]),
        (["  \t"], ["empty"]),
        (["eng\x00"], ["cannot be stored", "NUL"]),
        (["eng\ud800"], ["cannot be stored", "UTF-8"]),
        (["é" * (MAX_NAME_BYTES // 2 + 1)], [f"{MAX_NAME_BYTES} bytes"]),
    ],
)
def test_acl_names_refuses_what_cannot_be_an_acl_name(value: object, words: list[str]) -> None:
    with pytest.raises(IngestError) as caught:
        acl_names(value, "allowed_users", "hr/pay.md")
    assert caught.value.path == "hr/pay.md"
    assert "allowed_users" in caught.value.reason
    for word in words:
        assert word in caught.value.reason, caught.value.reason
