#!/usr/bin/env bash
# The main job on the embedded default: install, start the embedded store,
# ingest the sample corpus with its ACLs, and answer its sample questions.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/enterprise-rag models install
.venv/bin/enterprise-rag demo "$@"
