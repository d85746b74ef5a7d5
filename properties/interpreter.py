"""Run ``@triton.autotune`` kernels under Triton's CPU interpreter (TRITON_INTERPRET=1).

An autotuned kernel with more than one configuration benchmarks them on its first launch per key,
and benchmarking asks the GPU driver for a timer: under the interpreter there is none, so the
launch dies with "0 active drivers". ``install()`` makes the autotuner take the first
configuration that survives the kernel's own pruning (``early_config_prune``; the performance
model is skipped, it only ranks by speed) and never benchmark. The plugin calls it only when
TRITON_INTERPRET=1; on a GPU the autotuner is left alone.

Two patches, for both triton 3.6 and 3.9:

* ``Autotuner.prune_configs`` returns one configuration. triton >= 3.7 then skips benchmarking
  (its single-config shortcut); triton 3.6 benchmarks the one configuration anyway, so
* ``Autotuner._bench`` returns a zero timing without launching anything.

The kernel then runs once, with that configuration, as on a GPU. Results under the interpreter do
not depend on num_warps or num_stages (the interpreter has no warps), and a configuration's
meta-parameters (e.g. BLOCK sizes) are the first one's: a bug that only another configuration
has is left to the GPU run.
"""
from __future__ import annotations

import os

_INSTALLED = False


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def install() -> bool:
    """Patch triton's Autotuner (idempotent). Returns True when the patch is (now) in place."""
    global _INSTALLED
    if _INSTALLED:
        return True
    from triton.runtime.autotuner import Autotuner

    original_prune = Autotuner.prune_configs

    def prune_configs(self, kwargs):
        perf_model, self.perf_model = getattr(self, "perf_model", None), None
        try:
            configs = list(original_prune(self, kwargs))
        finally:
            self.perf_model = perf_model
        if not configs:  # pragma: no cover - triton raises first
            raise RuntimeError(f"autotuned kernel {self.base_fn.__name__}: no configuration left after pruning")
        return configs[:1]

    def _bench(self, *args, config, **meta):
        return [0.0, 0.0, 0.0]

    prune_configs.__wrapped__ = original_prune
    Autotuner.prune_configs = prune_configs
    Autotuner._bench = _bench
    _INSTALLED = True
    return True
