#!/usr/bin/env bash
# Install everything, check the import contracts (pyproject.toml [tool.importlinter]),
# then run the whole test suite against the real embedded PostgreSQL, the real
# parsers and the real local models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The OCR tests read scanned pages with the system's Tesseract (Debian's tesseract-ocr), installed here when missing.
if ! command -v tesseract >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get install -y -q tesseract-ocr >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q tesseract-ocr >/dev/null; }
fi
.venv/bin/lint-imports --no-logo
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
