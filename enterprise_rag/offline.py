"""Keep third-party libraries from reaching for the network at run time.

tiktoken and NLTK data ship inside llama-index-core; point the libraries there
when the user has not chosen a location, and tell Hugging Face libraries to
stay offline. Called once when the package is imported.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path


def use_bundled_caches() -> None:
    spec = find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:
        return
    static = Path(next(iter(spec.submodule_search_locations))) / "_static"
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(static / "tiktoken_cache"))
    os.environ.setdefault("NLTK_DATA", str(static / "nltk_cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
