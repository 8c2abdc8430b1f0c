"""Configuration: the shipped YAML profiles, precedence, errors that name the field, secrets."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, SecretStr

from enterprise_rag.config import RagSettings, load_settings
from enterprise_rag.errors import ConfigError, RagError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_YAML = REPO / "config" / "default.yaml"
PRODUCTION_YAML = REPO / "config" / "production.yaml"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ENTERPRISE_RAG_* variable of the calling shell leaks into these tests."""
    for name in list(os.environ):
        if name.upper().startswith("ENTERPRISE_RAG_"):
            monkeypatch.delenv(name)


def _defaults() -> RagSettings:
    """The model's own defaults (the environment is cleaned by the autouse fixture)."""
    return RagSettings()  # type: ignore[call-arg]  # mypy without the pydantic plugin wants every field


def _write(tmp_path: Path, text: str, name: str = "settings.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _fields(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf field of a settings model as (dotted name, value), sections recursed."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        dotted = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            yield from _fields(value, dotted + ".")
        else:
            yield dotted, value


def _yaml_leaves(data: dict[str, Any], fields: set[str], prefix: str = "") -> Iterator[str]:
    """Dotted names of the file's settings: a mapping is a section unless it is the value of a field."""
    for key, value in data.items():
        if isinstance(value, dict) and f"{prefix}{key}" not in fields:
            yield from _yaml_leaves(value, fields, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


# --- the shipped profiles -------------------------------------------------------------------------


def test_default_yaml_equals_model_defaults_field_by_field() -> None:
    loaded = load_settings(DEFAULT_YAML)
    defaults = _defaults()
    loaded_fields = dict(_fields(loaded))
    default_fields = dict(_fields(defaults))
    assert loaded_fields.keys() == default_fields.keys()
    for name, default in default_fields.items():
        assert loaded_fields[name] == default, f"config/default.yaml drifted at {name}"
    assert loaded == defaults


def test_default_yaml_spells_out_every_field_and_nothing_else() -> None:
    raw = yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8"))
    in_model = {name for name, _ in _fields(_defaults())}
    in_file = set(_yaml_leaves(raw, in_model))
    assert in_file == in_model, {"missing": in_model - in_file, "unknown": in_file - in_model}
    # the raw file values are the JSON form of the defaults (no value is left to an implicit default)
    assert raw == _defaults().model_dump(mode="json")


def test_default_yaml_has_a_comment_on_every_field_line() -> None:
    setting = re.compile(r"^\s*[a-z_]+:\s*\S")  # "key: value" lines, not section headers
    lines = [ln for ln in DEFAULT_YAML.read_text(encoding="utf-8").splitlines() if setting.match(ln)]
    assert lines
    uncommented = [ln for ln in lines if "#" not in ln]
    assert uncommented == []


def test_production_yaml_loads_with_openai_cohere_tavily_and_no_secrets_in_file() -> None:
    s = load_settings(PRODUCTION_YAML)
    assert s.database.dsn is None  # comes from ENTERPRISE_RAG_DATABASE__DSN
    assert (s.embedding.provider, s.embedding.model, s.embedding.dimensions) == (
        "openai",
        "text-embedding-3-small",
        1536,
    )
    assert (s.llm.generator.provider, s.llm.generator.model) == ("openai", "gpt-4o")
    assert (s.llm.grader.provider, s.llm.grader.model) == ("openai", "gpt-4o-mini")
    assert s.reranker.provider == "cohere"
    assert s.web_search.provider == "tavily"
    assert s.web_search.allowed_domains and s.web_search.egress_groups
    secrets = [name for name, value in _fields(s) if isinstance(value, SecretStr)]
    assert secrets == [], "production.yaml must not hold secrets"
    raw = PRODUCTION_YAML.read_text(encoding="utf-8")
    for line in raw.splitlines():
        code = line.split("#", 1)[0]
        assert not re.search(r"\b(api_key|dsn)\s*:", code), f"secret field set in the file: {line!r}"


def test_production_yaml_takes_the_dsn_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = "postgresql://rag:s3cret-pw@db.internal:5432/rag?sslmode=require"
    monkeypatch.setenv("ENTERPRISE_RAG_DATABASE__DSN", dsn)
    s = load_settings(PRODUCTION_YAML)
    assert s.database.dsn is not None and s.database.dsn.get_secret_value() == dsn
    assert s.embedding.dimensions == 1536  # the rest of the file still applies


# --- precedence ------------------------------------------------------------------------------------


def test_environment_wins_over_yaml_and_merges_per_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(
        tmp_path,
        "retrieval:\n  rrf_k: 45\n  top_k: 7\nllm:\n  grader:\n    max_tokens: 200\n"
        "web_search:\n  egress_groups: [from-yaml]\n",
    )
    monkeypatch.setenv("ENTERPRISE_RAG_RETRIEVAL__RRF_K", "30")
    monkeypatch.setenv("ENTERPRISE_RAG_LLM__GRADER__MAX_TOKENS", "100")
    monkeypatch.setenv("ENTERPRISE_RAG_WEB_SEARCH__EGRESS_GROUPS", '["research", "legal"]')
    s = load_settings(path)
    assert s.retrieval.rrf_k == 30
    assert s.retrieval.top_k == 7  # YAML sibling of an env-overridden field survives
    assert s.llm.grader.max_tokens == 100
    assert s.llm.generator.max_tokens == 512
    assert s.web_search.egress_groups == ["research", "legal"]


def test_keyword_overrides_win_over_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "retrieval:\n  rrf_k: 45\n")
    monkeypatch.setenv("ENTERPRISE_RAG_RETRIEVAL__RRF_K", "30")
    assert load_settings(path, retrieval={"rrf_k": 10}).retrieval.rrf_k == 10


def test_invalid_environment_value_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENTERPRISE_RAG_RETRIEVAL__RRF_K", "zero")
    with pytest.raises(ConfigError, match=r"retrieval\.rrf_k"):
        load_settings(None)


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("retrieval:\n  rrf_k: 0\n", "retrieval.rrf_k"),
        ("retrieval:\n  superseded: sometimes\n", "retrieval.superseded"),
        ("llm:\n  grader:\n    temperature: 5\n", "llm.grader.temperature"),
        ("ingest:\n  chunk_sizes: [128, 512]\n", "ingest.chunk_sizes"),
        ('database:\n  text_search_config: "english; DROP TABLE x"\n', "database.text_search_config"),
    ],
)
def test_invalid_yaml_value_gives_config_error_naming_the_dotted_field(tmp_path: Path, text: str, field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert field in message
    assert str(path) in message
    assert isinstance(info.value, RagError)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("retrieval:\n  rrf_kk: 60\n", "retrieval.rrf_kk"),
        ("retreival:\n  rrf_k: 60\n", "retreival"),
        ("llm:\n  generator:\n    modle: gpt-4o\n", "llm.generator.modle"),
    ],
)
def test_unknown_key_is_rejected_naming_it(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, text))
    assert key in str(info.value)


def test_invalid_yaml_gives_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "retrieval:\n  rrf_k: [60\n  top_k: 5\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(path)


def test_yaml_that_is_not_a_mapping_gives_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(_write(tmp_path, "- just\n- a list\n"))


def test_empty_yaml_means_defaults(tmp_path: Path) -> None:
    assert load_settings(_write(tmp_path, "# nothing set\n")) == _defaults()


def test_missing_file_gives_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_settings(missing)
    assert str(missing) in str(info.value)


def test_a_failed_load_does_not_leak_into_the_next(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings(_write(tmp_path, "retrieval:\n  rrf_k: 0\n"))
    assert load_settings(None) == _defaults()


def test_loads_in_parallel_threads_each_read_their_own_file(tmp_path: Path) -> None:
    files = {k: tmp_path / f"rrf{k}.yaml" for k in (7, 70)}
    for k, path in files.items():
        path.write_text(f"retrieval:\n  rrf_k: {k}\n", encoding="utf-8")
    with ThreadPoolExecutor(max_workers=4) as pool:
        loaded = list(pool.map(lambda k: (k, load_settings(files[k]).retrieval.rrf_k), [7, 70] * 40))
    assert all(k == got for k, got in loaded)
    assert RagSettings().retrieval.rrf_k == 60  # outside load_settings no file is read


def test_local_embedding_with_other_dimensions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"embedding\.dimensions"):
        load_settings(None, embedding={"dimensions": 768})
    with pytest.raises(ConfigError, match=r"embedding\.dimensions"):
        load_settings(_write(tmp_path, "embedding:\n  provider: local\n  dimensions: 1536\n"))
    # the same size is fine with a provider that makes it
    assert load_settings(None, embedding={"provider": "openai", "dimensions": 1536}).embedding.dimensions == 1536


# --- secrets ---------------------------------------------------------------------------------------


def test_secrets_never_appear_in_repr_str_or_public_dict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "embedding": "sk-embed-SECRET-1111",
        "generator": "sk-gen-SECRET-2222",
        "grader": "sk-grade-SECRET-3333",
        "reranker": "co-SECRET-4444",
        "web": "tvly-SECRET-5555",
        "password": "pg-SECRET-6666",
    }
    path = _write(
        tmp_path,
        f"""
embedding: {{provider: openai, model: text-embedding-3-small, dimensions: 1536, api_key: {secrets["embedding"]}}}
llm:
  generator: {{provider: openai, model: gpt-4o, api_key: {secrets["generator"]}}}
  grader: {{provider: openai, model: gpt-4o-mini, api_key: {secrets["grader"]}}}
reranker: {{provider: cohere, api_key: {secrets["reranker"]}}}
""",
    )
    monkeypatch.setenv("ENTERPRISE_RAG_WEB_SEARCH__API_KEY", secrets["web"])
    monkeypatch.setenv("ENTERPRISE_RAG_DATABASE__DSN", f"postgresql://rag:{secrets['password']}@db:5432/rag")
    s = load_settings(path, web_search={"provider": "tavily"})

    # the values arrived ...
    assert s.embedding.api_key is not None and s.embedding.api_key.get_secret_value() == secrets["embedding"]
    assert s.llm.grader.api_key is not None and s.llm.grader.api_key.get_secret_value() == secrets["grader"]
    assert s.web_search.api_key is not None and s.web_search.api_key.get_secret_value() == secrets["web"]
    assert s.database.dsn is not None and secrets["password"] in s.database.dsn.get_secret_value()

    # ... and show nowhere
    public = s.public_dict()
    renderings = {
        "repr": repr(s),
        "str": str(s),
        "public_dict": str(public),
        "json": json.dumps(public),
        "section repr": repr(s.llm) + repr(s.embedding) + repr(s.database),
    }
    for where, text in renderings.items():
        for secret in secrets.values():
            assert secret not in text, f"secret leaked in {where}"
    assert public["embedding"]["api_key"] not in (None, "")  # masked, not dropped: the key is set
    assert public["web_search"]["allowed_domains"] == []  # the rest is plain data


def test_resolved_data_dir_never_under_root_for_root(tmp_path: Path) -> None:
    s = load_settings(None)
    resolved = s.resolved_data_dir()
    assert resolved.is_absolute()
    if os.name != "nt" and os.geteuid() == 0:
        assert resolved != Path("/root") and Path("/root") not in resolved.parents
    assert load_settings(None, data_dir=tmp_path).resolved_data_dir() == tmp_path.resolve()
