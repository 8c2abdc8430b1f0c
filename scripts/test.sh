#!/usr/bin/env bash
# Install everything, then run the whole test suite against the real embedded
# PostgreSQL, the real parsers and the real local models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
