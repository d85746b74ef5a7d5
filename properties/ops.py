"""The target adapter: the module under test, chosen at run time, and how the laws call it.
Importing this module registers the built-in op families (properties/families/), whose specs the
adapter checks the target's functions against."""
from __future__ import annotations

import importlib
import inspect
import types

import torch

from . import families  # noqa: F401  (registers the built-in ops and their laws)
from .spec import OPS, lookup


# ----------------------------------------------------------------------------------------------
# the target
# ----------------------------------------------------------------------------------------------
# Exceptions a target may raise to refuse an input it does not support (the example is then
# discarded). By default only NotImplementedError, Python's own word for "not supported": TypeError
# and ValueError are also what a broken call raises (arguments that do not bind, a shape check that
# rejects a valid input), and taken as refusals they turned such a module's every test into a skip
# and its run green. A module that refuses with them says so in SUITE_REFUSALS; the project's own
# kernels declare none (any exception is a failure).
DEFAULT_REFUSALS = (NotImplementedError,)

# The module attribute naming the ops whose results may change from call to call within their
# bounds: a summation order fixed only at run time (atomic adds from concurrent programs).
# flash-attention's backward accumulates dq that way unless deterministic=True, and PyTorch lists
# its own CUDA ops that do (torch.use_deterministic_algorithms): both projects document it as a
# choice, not a bug, so a module declares it and the laws that call an op twice judge the two
# results each within its bound instead of bitwise (invariants/_checks.py, repeats_agree).
NONDETERMINISTIC = "NONDETERMINISTIC"


class TargetError(Exception):
    """The module named by --target cannot be tested at all: it does not import, or an offered
    function cannot take the calls of the contract. The message says what and how to fix it."""


def _import_failure(name: str, e: BaseException) -> str:
    """What importing the target raised, with the traceback through the target's own files only
    (importlib's and the suite's frames dropped)."""
    import traceback

    from .report import is_suite_frame
    te = traceback.TracebackException(type(e), e, e.__traceback__)
    keep = [f for f in te.stack
            if not (f.filename.startswith("<frozen") or "importlib" in f.filename or is_suite_frame(f))]
    te.stack = traceback.StackSummary.from_list(keep)
    text = "".join(te.format()).rstrip()
    return f"--target {name!r}: importing the module raised {type(e).__name__}: {e}\n{text}"


class Target:
    """The module under test (its import name, or the module itself). Functions reduce over the
    last axis; missing ones are skipped."""

    # the dtypes the autograd probe tries, float64 first (gradcheck_float64's, and the one most
    # kernel libraries refuse: they compute in float32)
    PROBE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, module):
        if isinstance(module, types.ModuleType):
            self.name, self.module = module.__name__, module
        else:
            self.name = module
            try:
                self.module = importlib.import_module(module)
            except Exception as e:  # a syntax error, a missing dependency, an error at import
                raise TargetError(_import_failure(module, e)) from e
        self.declares_refusals = hasattr(self.module, "SUITE_REFUSALS")
        self.refusals = tuple(getattr(self.module, "SUITE_REFUSALS", DEFAULT_REFUSALS))
        self.device = "cpu"
        self._autograd = {}

    def contract_errors(self) -> list:
        """One line per offered function whose signature cannot take the call every law makes
        (its spec's tensor arguments by position, its options by keyword): such a function is
        broken, not refusing, and every example would fail alike. Functions without an
        inspectable signature (builtins) are not judged here."""
        errors = []
        for name, spec in OPS.items():
            fn = self.fn(name)
            if fn is None:
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            try:
                sig.bind(*spec.args, **{o: None for o in spec.options})
            except TypeError as e:
                errors.append(f"{self.name}.{name}{sig}: {e}; expected {spec.call_signature}")
        return errors

    def nondeterministic_ops(self) -> frozenset:
        """The ops the module declares nondeterministic (its NONDETERMINISTIC: a tuple, list or
        set of op names; none by default). ValueError naming the attribute when it is anything
        else or names an op the suite does not know."""
        declared = getattr(self.module, NONDETERMINISTIC, ())
        if isinstance(declared, str) or not isinstance(declared, (tuple, list, set, frozenset)):
            raise ValueError(f"{self.name}.{NONDETERMINISTIC}: expected a tuple of op names, e.g. "
                             f"('attention_backward',), got {declared!r}")
        unknown = sorted(repr(n) for n in declared if not isinstance(n, str) or n not in OPS)
        if unknown:
            raise ValueError(f"{self.name}.{NONDETERMINISTIC}: {', '.join(unknown)} is not an op of the suite; "
                             f"expected names among {', '.join(OPS)}")
        return frozenset(declared)

    def nondeterministic(self, op_name: str) -> bool:
        """Whether the module declares op_name's results may differ between calls on the same
        input within their bounds (NONDETERMINISTIC)."""
        return op_name in self.nondeterministic_ops()

    def fn(self, op_name: str):
        f = getattr(self.module, op_name, None)
        return f if callable(f) else None

    def has(self, op_name: str) -> bool:
        return self.fn(op_name) is not None

    def offers(self, op_name: str, option: str) -> bool:
        """Whether the op's function takes the keyword option (a parameter of that name, or
        **kwargs); a function without an inspectable signature is taken to."""
        try:
            params = inspect.signature(self.fn(op_name)).parameters
        except (TypeError, ValueError):
            return self.has(op_name)
        return option in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

    def offered(self, op_name: str) -> tuple:
        """The options of the op's OpSpec.offered that its function takes."""
        return tuple(o for o in lookup(op_name).offered if self.offers(op_name, o)) if self.has(op_name) else ()

    def accepts_dim(self, op_name: str) -> bool:
        try:
            return "dim" in inspect.signature(self.fn(op_name)).parameters
        except (TypeError, ValueError):
            return False

    def call(self, op_name: str, *tensors, **kw):
        return self.fn(op_name)(*tensors, **kw)

    def autograd_probe(self, op_name: str) -> dict:
        """{dtype: None where the op returns an output that requires grad for an input that does,
        else what the call raised or returned}, for each of PROBE_DTYPES: its spec's sample call
        around a (2, 3) tensor of that dtype. Probed once per op (the laws that need autograd
        judge the dtypes where it is None)."""
        if op_name not in self._autograd:
            self._autograd[op_name] = {dtype: self._probe(op_name, dtype) for dtype in self.PROBE_DTYPES}
        return self._autograd[op_name]

    def _probe(self, op_name: str, dtype: torch.dtype):
        try:
            x = torch.zeros(2, 3, dtype=dtype, device=self.device, requires_grad=True)
            args, kwargs = lookup(op_name).sample(x)
            out = self.call(op_name, *args, **kwargs)
        except Exception as e:  # an op that cannot take such an input (a refusal of the dtype included)
            return f"{type(e).__name__}: {str(e)[:200]}"
        if isinstance(out, (tuple, list)) and out:  # an op of several outputs: its first (attention's o)
            out = out[0]
        if not isinstance(out, torch.Tensor):
            return f"it returned {type(out).__name__}, not a tensor"
        return None if out.requires_grad else "its output does not require grad"

    def autograd_dtypes(self, op_name: str) -> tuple:
        """The dtypes in which the op is differentiable (autograd_probe), float64 first."""
        return tuple(dtype for dtype, why in self.autograd_probe(op_name).items() if why is None)

    def supports_autograd(self, op_name: str, dtype: torch.dtype = None) -> bool:
        """True when the op is differentiable in some dtype of PROBE_DTYPES (in dtype, if given):
        most kernel libraries compute in float32 and refuse float64, and their autograd is
        judged in the dtypes they take."""
        dtypes = self.autograd_dtypes(op_name)
        return bool(dtypes) if dtype is None else dtype in dtypes

    def autograd_refused(self, op_name: str, dtypes=None) -> str:
        """What the autograd probe met in the given dtypes where the op is not differentiable,
        one clause per distinct message ('float64: NotImplementedError: ...'), or ''."""
        probe = self.autograd_probe(op_name)
        by_message = {}
        for dtype in self.PROBE_DTYPES if dtypes is None else dtypes:
            if probe.get(dtype) is not None:
                by_message.setdefault(probe[dtype], []).append(str(dtype).replace("torch.", ""))
        return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_message.items())


__all__ = ["OPS", "DEFAULT_REFUSALS", "Target", "TargetError"]
