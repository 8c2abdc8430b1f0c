#!/usr/bin/env bash
# Install everything, check the import contracts (pyproject.toml [tool.importlinter]),
# then run the whole test suite against the real embedded PostgreSQL, the real
# parsers and the real local models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lint-imports --no-logo
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
