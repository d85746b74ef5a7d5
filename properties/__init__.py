"""The property suite: strategies, tolerances, invariants and the pytest plugin that runs them.

Every way into the suite (the pytest plugin, ``python -m softmax_properties.properties.replay``,
a saved counterexample, the isolation worker) imports this package first, so this is where
Triton's interpreter is chosen when there is no CUDA: TRITON_INTERPRET must be set before triton
is imported. A value already in the environment is kept, and then CUDA is not queried: the
isolation worker's fork server imports this package, and a CUDA query there (which initializes
the driver) would make every worker forked from it fail its first CUDA call ("Cannot re-initialize
CUDA in forked subprocess"); the pytest process passes its choice to the server instead."""
import os

import torch  # torch does not import triton

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
