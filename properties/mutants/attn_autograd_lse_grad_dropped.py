"""attention as a custom autograd Function that returns lse beside o and whose backward takes
(do, dlse) and uses do only: lse requires grad, but its cotangent never reaches dq and dk (an
autograd wrapper written for o's gradient, its lse returned for merges). Gradients through o
alone are right."""
from . import _attn_base as A

attention = A.with_backward(lambda needs, dq, dk, dv: (dq, dk, dv), drop_dlse=True)  # BUG: lse's cotangent dropped

OP = "attention"
CAUGHT_BY = ("attention_lse_autograd_matches_vjp",)
