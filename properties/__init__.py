"""The property suite: strategies, tolerances, invariants and the pytest plugin that runs them.

Every way into the suite (the pytest plugin, ``python -m softmax_properties.properties.replay``,
a saved counterexample, the isolation worker) imports this package first, so this is where
Triton's interpreter is chosen when there is no CUDA: TRITON_INTERPRET must be set before triton
is imported. A value already in the environment is kept."""
import os

import torch  # torch does not import triton

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
