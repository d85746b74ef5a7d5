#!/usr/bin/env bash
# Sourced by the GPU scripts here: the suite and the benchmarks import softmax_properties, so the
# checkout is installed, editable, without dependencies (the machine's own torch and triton stay)
# and without a build environment (the machine may be offline).
python3 -m pip install -q --no-deps --no-build-isolation -e "$(dirname "${BASH_SOURCE[0]}")/.." \
  || { echo "installing the checkout failed" >&2; exit 2; }
