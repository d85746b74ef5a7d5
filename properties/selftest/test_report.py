"""A report names who raised: the target's frames when its call raised, the law's frames (and
the words "the suite's own code") when the law's own computation did -- never only the runner's
frames, which is what a report showed when a law's comparison raised on a GPU (a CPU tensor next
to a CUDA one: every frame of its own was dropped as the suite's machinery). And a mismatch
below the output dtype's normal range is told in that range's spacings."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch

from .. import report, tolerances


def _raised(fn):
    try:
        fn()
    except Exception as e:  # the report of whatever fn raised
        return report.failure_text(e)
    raise AssertionError("expected an exception")


def test_an_error_in_the_suites_code_shows_the_suites_frames():
    # compare() of tensors that do not broadcast: torch raises inside tolerances.py
    text = _raised(lambda: tolerances.compare(torch.zeros(3), torch.zeros(4), torch.zeros(4), torch.float32))
    assert "raised in the suite's own code" in text, text
    assert "tolerances.py" in text and "in compare" in text, text
    assert "pluggy" not in text and "_pytest" not in text, text


def test_an_error_in_the_targets_call_shows_the_targets_frames(tmp_path):
    path = tmp_path / "user_kernel.py"
    path.write_text(textwrap.dedent("""\
        def softmax(x):
            raise ValueError("x must be 2-D")
        """))
    spec = importlib.util.spec_from_file_location("user_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = _raised(lambda: mod.softmax(None))
    assert text.startswith("ValueError: x must be 2-D"), text
    assert "raised at (innermost last):" in text and "user_kernel.py" in text, text
    assert "the suite's own code" not in text and "test_report.py" not in text, text


@pytest.mark.parametrize("path, package", [
    ("/v/lib/python3.12/site-packages/torch/functional.py", "torch"),
    ("/v/lib/python3.12/site-packages/pluggy/_callers.py", "pluggy"),
    ("/usr/lib/python3/dist-packages/hypothesis/core.py", "hypothesis"),
    ("/home/me/kernels/softmax.py", None),
])
def test_frames_are_told_apart_by_their_package(path, package):
    frame = type("Frame", (), {"filename": path})()
    assert report._package(frame) == package


def test_a_mismatch_below_the_normal_range_is_told_in_spacings():
    """A float16 dk of 0.0 where the exact value is 5.1e-8 (tolerance 4.4e-8) reads as "5.13e-08 >
    tolerance" alone, which looks like a large relative error; the report adds that the value
    lies below float16's normal range, where values are 5.96e-8 apart (0.86 of a spacing)."""
    text = tolerances.mismatch(0.0, 5.135e-8, 4.35e-8, torch.float16)
    assert "below float16's normal range (6.1e-05)" in text and "5.96e-08 apart" in text, text
    assert "0.862 spacings" in text, text
    assert "spacing" not in tolerances.mismatch(1.0, 1.1, 1e-3, torch.float16)
    assert "spacing" not in tolerances.mismatch(0.0, 5.135e-8, 4.35e-8)  # no dtype given
