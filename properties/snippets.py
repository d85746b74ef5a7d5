"""The code snippets a reproducer prints and the suite executes (a layout, an lse layout):
compiled once per text, so that running them costs no more than the tensor work they do."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=256)
def compiled(code: str):
    return compile(code, "<layout>", "exec")
