"""The code snippets a reproducer prints and the suite executes (a layout, an lse layout, the
class indices and dloss of a cross-entropy case): compiled once per text, so that running them
costs no more than the tensor work they do, and the tensors the suite feeds are those the
reproducer prints."""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=256)
def compiled(code: str):
    return compile(code, "<layout>", "exec")


def built(code: str, name: str, **scope):
    """Run a snippet and return the tensor it names. ``scope``: its variables (``V``, ``device``)."""
    scope["torch"] = torch
    exec(compiled(code), scope)
    return scope[name]
