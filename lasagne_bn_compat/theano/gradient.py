"""``theano.gradient``: PyTensor's gradient module, plus Theano's ``consider_constant``.

``jacobian`` builds Theano's matrix without a loop where it can (see its
docstring).

``Rop`` / ``Lop`` keep Theano's signatures on PyTensor's ``pushforward`` /
``pullback`` (PyTensor's own ``Rop`` / ``Lop`` are deprecated aliases of
those and warn on every call).
"""

from __future__ import annotations

from pytensor.gradient import *  # noqa: F403
from pytensor.gradient import jacobian as _jacobian
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


def jacobian(expression, wrt, consider_constant=None, disconnected_inputs="raise"):
    """Theano's ``jacobian``: the derivatives of each element of ``expression``.

    Theano built the rows one by one with ``scan``, over the length of
    ``expression``.  Under ``mode='JAX'`` that length, known only when the
    function runs, cannot size a loop (a WGAN-GP critic's gradient penalty
    failed to trace), so every row is built at once here (PyTensor's
    ``vectorize=True``: the same values); a graph that cannot be built so
    gets Theano's loop.
    """
    try:
        return _jacobian(expression, wrt, consider_constant, disconnected_inputs, vectorize=True)
    except NotImplementedError:
        return _jacobian(expression, wrt, consider_constant, disconnected_inputs, vectorize=False)
