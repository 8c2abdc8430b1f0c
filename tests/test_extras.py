"""Optional extras give an actionable error; Principal validation; retrieval needs a principal."""

from __future__ import annotations

import dataclasses
import json

import pytest

from enterprise_rag import MissingExtraError, PermissionDeniedError, Principal, RagError
from enterprise_rag.extras import require
from enterprise_rag.principal import require_principal

# --- extras -----------------------------------------------------------------------------------------


def test_missing_extra_names_the_pip_command() -> None:
    with pytest.raises(MissingExtraError) as info:
        require("not_a_module_xyz", "cohere")
    message = str(info.value)
    assert "pip install 'enterprise-rag[cohere]'" in message
    assert "not_a_module_xyz" in message
    # one hierarchy, and still an ImportError for code that catches that
    assert isinstance(info.value, RagError)
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ImportError)


def test_missing_submodule_of_a_missing_package_is_reported_the_same_way() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'enterprise-rag\[tavily\]'"):
        require("not_a_module_xyz.sub.module", "tavily")


def test_installed_module_is_returned() -> None:
    assert require("json", "local") is json


# --- Principal -------------------------------------------------------------------------------------


def test_groups_are_deduplicated_in_order_and_empty_strings_dropped() -> None:
    p = Principal(user_id="dana", groups=["hr", "", "all-staff", "hr", "", "all-staff", "finance"])
    assert p.groups == ("hr", "all-staff", "finance")
    assert p.users == ["dana"]


def test_groups_accept_tuples_and_default_to_none() -> None:
    assert Principal(user_id="dana", groups=("a", "b", "a")).groups == ("a", "b")
    assert Principal(user_id="dana").groups == ()
    assert Principal(user_id="dana", groups=None).groups == ()
    assert Principal(user_id="dana", groups=[]).groups == ()


def test_principal_without_groups_or_user_matches_nobody() -> None:
    p = Principal(user_id="", groups=["", ""])
    assert p.groups == ()
    assert p.users == []  # an empty id never matches an allowed_users entry


def test_principal_is_immutable_and_hashable() -> None:
    p = Principal(user_id="dana", groups=["hr"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.groups = ("admins",)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.user_id = "root"  # type: ignore[misc]
    assert p == Principal(user_id="dana", groups=["hr", "hr"])
    assert hash(p) == hash(Principal(user_id="dana", groups=("hr",)))
    assert repr(p) == "Principal(user_id='dana', groups=('hr',))"


def test_mutating_the_input_list_does_not_change_the_principal() -> None:
    groups = ["hr"]
    p = Principal(user_id="dana", groups=groups)
    groups.append("admins")
    assert p.groups == ("hr",)


@pytest.mark.parametrize("user_id", [None, 42, b"dana", ["dana"]])
def test_user_id_must_be_a_string(user_id: object) -> None:
    with pytest.raises(PermissionDeniedError, match="user_id"):
        Principal(user_id=user_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("groups", ["hr", {"hr"}, 5])
def test_groups_must_be_a_list(groups: object) -> None:
    with pytest.raises(PermissionDeniedError, match="groups"):
        Principal(user_id="dana", groups=groups)  # type: ignore[arg-type]


def test_a_single_group_string_is_not_split_into_letters() -> None:
    with pytest.raises(PermissionDeniedError, match="groups"):
        Principal(user_id="dana", groups="hr")  # type: ignore[arg-type]


# --- require_principal -----------------------------------------------------------------------------


@pytest.mark.parametrize("user", [None, "dana", {"user_id": "dana", "groups": ["hr"]}, ("dana", ["hr"])])
def test_require_principal_refuses_anything_but_a_principal(user: object) -> None:
    with pytest.raises(PermissionDeniedError, match="Principal"):
        require_principal(user)


def test_require_principal_returns_the_principal() -> None:
    p = Principal(user_id="dana", groups=["hr"])
    assert require_principal(p) is p
    assert isinstance(PermissionDeniedError("x"), RagError)
