#!/usr/bin/env bash
# Download the wheels a GPU machine without internet lacks to run circuitlab from the source tree
# (Python 3.12, x86-64 manylinux): TransformerLens and what its import pulls in, pydantic, plotly.
# Everything else circuitlab needs (torch, triton, numpy, safetensors, tokenizers, pandas, pyarrow, scipy,
# filelock, tqdm, jaxtyping, einops, transformers) is assumed present there. On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.whl}"
mkdir -p "$dest"
wheels=(
  transformer-lens==4.3.0 fancy-einsum==0.0.3 beartype==0.23.1 typeguard==4.6.1
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  plotly==7.1.0
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$dest" "${wheels[@]}"
ls "$dest"
