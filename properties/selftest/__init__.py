"""The project's own tests: meta tests of the suite's machinery, the mutant zoo, the kernels' unit
tests and the repository's layout. They run from a checkout (some read its docs or start pytest
in it), against the project's kernels only; the wheel leaves them out."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
