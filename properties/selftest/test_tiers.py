"""The tiers: every law declares one, the strict ones are documented with their reason, and the
default run leaves the strict laws out."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..invariants import REGISTRY, TIERS, invariant
from . import ROOT



def test_every_law_has_a_tier_and_strict_laws_are_documented():
    """docs/tiers.md names each strict law with its reason (so the table cannot drift from the
    registry); every law's tier is one of TIERS."""
    with open(os.path.join(ROOT, "docs", "tiers.md")) as f:
        doc = f.read()
    assert {inv.tier for inv in REGISTRY} <= set(TIERS)
    missing = [inv.name for inv in REGISTRY if inv.tier == "strict" and f"`{inv.name}`" not in doc]
    assert not missing, f"strict laws missing from docs/tiers.md: {missing}"


def test_registration_rejects_bad_tiers_and_duplicates():
    with pytest.raises(ValueError, match="tier must be one of"):
        invariant(_softmax, tier="lenient")
    with pytest.raises(ValueError, match="registered twice"):
        invariant(_softmax)(_named(REGISTRY[0].name))
    with pytest.raises(TypeError, match="applies must be a predicate on an OpSpec"):
        invariant("softmax")
    with pytest.raises(ValueError, match="needs: each entry must be"):
        invariant(_softmax, needs=("gpu",))


def _softmax(op):
    return op.name == "softmax"


def _named(name):
    def f(case, target):
        pass
    f.__name__ = name
    return f


@pytest.mark.parametrize("tier", ["default", "strict"])
def test_tier_option_selects_laws(tier):
    """--tier default collects no strict law; --tier strict collects every law."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "properties", "--co", "-q", "-p", "no:cacheprovider",
                          "--tier", tier, "properties/test_properties.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = {line.split("[", 1)[1].rsplit("-", 1)[0] for line in out.stdout.splitlines() if "test_property[" in line}
    strict = {inv.name for inv in REGISTRY if inv.tier == "strict"}
    if tier == "default":
        assert ids and not ids & strict, sorted(ids & strict)
    else:
        assert strict <= ids, sorted(strict - ids)
