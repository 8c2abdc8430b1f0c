"""The configuration reference covers every setting, with the real defaults, and is not stale."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from enterprise_rag.config import ENV_PREFIX, RagSettings
from enterprise_rag.config_reference import DEFAULT_OUTPUT, main, render

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "configuration.md"
ROW = re.compile(r"^\| `([\w.]+)` \| `(.*?)` \| `(.*?)` \| `(\w+)` \| (.*) \|$", re.M)


def leaf_fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Dotted name -> FieldInfo of every leaf field, walked independently of the generator."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(leaf_fields(ann, f"{prefix}{name}."))
        else:
            out[prefix + name] = field
    return out


def documented_rows() -> dict[str, tuple[str, str, str, str]]:
    return {m[0]: (m[1], m[2], m[3], m[4]) for m in ROW.findall(DOC.read_text(encoding="utf-8"))}


def dotted_get(data: dict[str, Any], name: str) -> Any:
    for part in name.split("."):
        data = data[part]
    return data


def test_the_generator_writes_the_committed_file() -> None:
    assert DEFAULT_OUTPUT == DOC
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `python -m enterprise_rag.config_reference`"
    )
    assert main(["--check"]) == 0


def test_every_setting_is_documented_once_and_nothing_else() -> None:
    fields = leaf_fields(RagSettings)
    rows = documented_rows()
    assert len(fields) > 50
    assert sorted(rows) == sorted(fields)
    assert len(ROW.findall(DOC.read_text(encoding="utf-8"))) == len(fields)  # no duplicates


def test_every_setting_has_a_meaning() -> None:
    fields = leaf_fields(RagSettings)
    assert [name for name, f in fields.items() if not (f.description or "").strip()] == []
    for name, (_, _, _, meaning) in documented_rows().items():
        assert meaning.strip(), name


def test_documented_defaults_and_env_names_are_the_real_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    defaults = RagSettings().model_dump(mode="json")
    for name, (_, default, env, _) in documented_rows().items():
        real = dotted_get(defaults, name)
        shown = None if default == "(secret)" else json.loads(default)
        assert shown == real, f"{name}: documented {default}, real {real!r}"
        assert env == ENV_PREFIX + name.upper().replace(".", "__")
    # A nested default that differs from its model's own default is shown as the settings have it.
    assert documented_rows()["llm.grader.max_tokens"][1] == str(defaults["llm"]["grader"]["max_tokens"])


def test_a_documented_env_name_really_sets_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    env = documented_rows()["retrieval.top_k"][2]
    monkeypatch.setenv(env, "9")
    assert RagSettings().retrieval.top_k == 9
    monkeypatch.setenv(documented_rows()["web_search.egress_groups"][2], '["research"]')
    assert RagSettings().web_search.egress_groups == ["research"]


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(render().replace("`retrieval.top_k`", "`retrieval.topk`"), encoding="utf-8")
    assert main(["--check", "--output", str(stale)]) == 1
    assert main(["--output", str(stale)]) == 0
    assert main(["--check", "--output", str(stale)]) == 0
