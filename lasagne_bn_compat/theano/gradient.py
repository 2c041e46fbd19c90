"""``theano.gradient``: PyTensor's gradient module, plus Theano's ``consider_constant``.

``Rop`` / ``Lop`` keep Theano's signatures on PyTensor's ``pushforward`` /
``pullback`` (PyTensor's own ``Rop`` / ``Lop`` are deprecated aliases of
those and warn on every call).
"""

from __future__ import annotations

from pytensor.gradient import *  # noqa: F403
from pytensor.gradient import pullback, pushforward, zero_grad

#: Theano's deprecated name for a gradient stop that gives zeros.
consider_constant = zero_grad


def Rop(f, wrt, eval_points, disconnected_outputs="raise", return_disconnected="zero"):  # noqa: N802
    """Theano's R-operator: the Jacobian of ``f`` w.r.t. ``wrt`` times ``eval_points``."""
    return pushforward(
        f,
        wrt,
        eval_points,
        disconnected_outputs=disconnected_outputs,
        return_disconnected=return_disconnected,
    )


def Lop(f, wrt, eval_points, consider_constant=None, disconnected_inputs="raise"):  # noqa: N802
    """Theano's L-operator: ``eval_points`` times the Jacobian of ``f`` w.r.t. ``wrt``."""
    return pullback(
        f,
        wrt,
        eval_points,
        consider_constant=consider_constant,
        disconnected_inputs=disconnected_inputs,
    )
