"""The property suite: strategies, tolerances, invariants and the pytest plugin that runs them."""
