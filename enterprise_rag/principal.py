"""The identity a request is made for: a user id and the groups it belongs to."""

from __future__ import annotations

from dataclasses import dataclass, field

from enterprise_rag.errors import PermissionDeniedError


@dataclass(frozen=True)
class Principal:
    """Who is asking. Every retrieval is scoped to one principal.

    A document is visible when its ``allowed_users`` contains ``user_id`` or its
    ``allowed_groups`` shares a group with ``groups``. A principal with no groups
    and no matching user sees nothing.

    >>> Principal(user_id="dana", groups=["all-staff"])
    Principal(user_id='dana', groups=('all-staff',))
    >>> Principal("dana", ["all-staff", "", "all-staff"]).groups    # blanks and repeats dropped
    ('all-staff',)
    >>> rag.query("How long is the refund window?", user=Principal("dana", ["all-staff"]))  # doctest: +SKIP
    """

    user_id: str
    groups: tuple[str, ...] = field(default_factory=tuple)

    def __init__(self, user_id: str, groups: list[str] | tuple[str, ...] | None = None) -> None:
        if not isinstance(user_id, str):
            raise PermissionDeniedError(f"Principal.user_id must be a string, got {type(user_id).__name__}")
        if groups is not None and not isinstance(groups, (list, tuple)):
            raise PermissionDeniedError("Principal.groups must be a list of strings")
        cleaned = tuple(dict.fromkeys(g for g in (groups or ()) if isinstance(g, str) and g != ""))
        object.__setattr__(self, "user_id", user_id)
        object.__setattr__(self, "groups", cleaned)

    @property
    def users(self) -> list[str]:
        """The user ids that match this principal in an ``allowed_users`` list (none for an empty id)."""
        return [self.user_id] if self.user_id else []


def storable_name(name: str) -> bool:
    """Whether PostgreSQL text can hold ``name`` (no NUL byte, valid UTF-8).

    No stored ACL or trace can contain a name that fails this, so such a name matches nothing.
    """
    if "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from json.loads('"\\ud800"')
        return False
    return True


def require_principal(user: object) -> Principal:
    """Return ``user`` if it is a :class:`Principal`; otherwise refuse (no principal is not 'everyone')."""
    if not isinstance(user, Principal):
        raise PermissionDeniedError("retrieval needs the asking user: pass user=Principal(user_id=..., groups=[...])")
    return user
