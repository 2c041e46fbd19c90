"""The argument rules of the normalization layers and Ops, each written once.

Every rule here is used twice: when a graph is built, by the layers and by
the Ops' ``make_node`` (a bad constant is refused there, before anything
is compiled), and when a graph runs, for values that were symbolic when it
was built (``epsilon`` or ``running_average_factor`` as a ``T.scalar()``).
The run-time check is the same rule in each backend's language, generated
from one :class:`Range`: NumPy ``perform`` calls :meth:`Range.check`, the
Numba wrappers test :meth:`Range.source` and the C code
:meth:`Range.c_source`, and JAX traces :meth:`Range.holds`; whichever finds
a bad value, the error is raised by :meth:`Range.check`, so its type and
message are the same everywhere.  (Under PyTensor's ``mode="JAX"`` the
``ValueError`` reaches the caller inside JAX's own ``JaxRuntimeError``,
message included: a traced program cannot raise, so a bad value is sent to
the host to raise there; :func:`lasagne_bn.ops.jax.linker.jax_mode`, which
the compat ``theano.function`` uses for ``mode='JAX'``, raises it as itself.)

The rules:

- **axes** (:func:`normalize_axes`): a mode string, an int or a sequence
  of ints; negative axes count from the end (NumPy's rule, also for the
  Ops, where Theano 1.0 refused them: no legacy graph relied on that);
  repeated or out-of-range axes are a ``ValueError``, non-ints a
  ``TypeError``.  The Ops refuse an empty tuple (Theano did); layers allow
  it (Lasagne normalized over nothing).
- **epsilon** (:data:`EPSILON`): finite and > 0.  **running_average_factor**
  (:data:`RUNNING_AVERAGE_FACTOR`, the layers' ``alpha``): in ``[0, 1]``.
- **dtypes** (:func:`check_float`): inputs and parameters are float16,
  float32 or float64.

>>> normalize_axes((-1, 0), 4)
(0, 3)
>>> try:
...     EPSILON.check(-1.0)
... except ValueError as error:  # OutOfRange, a ValueError
...     print(error)
epsilon=-1.0 is out of range: expected a value in (0.0, inf)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.link.c.op import COp
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.rewrites import ensure_registered

__all__ = [
    "ALPHA",
    "D_MAX",
    "EPSILON",
    "FLOAT_DTYPES",
    "LAYER_AXES_MODES",
    "OP_AXES_MODES",
    "OutOfRange",
    "RULES",
    "RUNNING_AVERAGE_FACTOR",
    "R_MAX",
    "Range",
    "RangeCheck",
    "check_float",
    "check_scalar",
    "checked",
    "constant_value",
    "normalize_axes",
    "scalar_input",
]

# --------------------------------------------------------------------------
# dtypes

FLOAT_DTYPES = ("float16", "float32", "float64")


def check_float(var: Variable, name: str) -> None:
    """Raise ``TypeError`` unless ``var`` is a float tensor.

    >>> check_float(pt.lmatrix(), "inputs")
    Traceback (most recent call last):
    TypeError: inputs has dtype int64; expected a float dtype (float16, float32, float64)
    """
    dtype = getattr(getattr(var, "type", None), "dtype", None)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} has dtype {dtype}; expected a float dtype ({', '.join(FLOAT_DTYPES)})"
        )


# --------------------------------------------------------------------------
# axes


def _spatial(ndim: int) -> tuple[int, ...]:
    return (0, *range(2, ndim))


#: Theano's ``axes`` modes (the Ops): ``'spatial'`` of a 1-d input is
#: ``(0,)``, as Theano 1.0 made it.
OP_AXES_MODES: Mapping[str, Callable[[int], tuple[int, ...]]] = {
    "per-activation": lambda ndim: (0,),
    "spatial": _spatial,
}
#: Lasagne's ``axes`` mode (the layers): all axes but the second.
LAYER_AXES_MODES: Mapping[str, Callable[[int], tuple[int, ...]]] = {"auto": _spatial}


def normalize_axes(
    axes,
    ndim: int,
    *,
    what: str = "axes",
    modes: Mapping[str, Callable[[int], tuple[int, ...]]] = OP_AXES_MODES,
    allow_empty: bool = False,
) -> tuple[int, ...]:
    """``axes`` as a sorted tuple of distinct axes in ``[0, ndim)``.

    Parameters
    ----------
    axes : str, int or sequence of int
        A key of ``modes``, one axis, or several; negative axes count from
        the end.
    ndim : int
        Number of dimensions of the input.
    what : str
        The argument's name, for messages (``'axes'``, ``'shared_axes'``).
    modes : mapping
        The accepted strings and the axes each stands for
        (:data:`OP_AXES_MODES` or :data:`LAYER_AXES_MODES`).
    allow_empty : bool
        Whether ``()`` is accepted (layers) or a ``ValueError`` (Ops).

    Raises
    ------
    ValueError
        For an unknown string, an empty (unless allowed), repeated or
        out-of-range axis list.
    TypeError
        For anything else than a string, an int or a sequence of ints.

    Examples
    --------
    >>> normalize_axes('spatial', 4)
    (0, 2, 3)
    >>> normalize_axes([2, -3], 3)
    (0, 2)
    >>> normalize_axes('auto', 2, modes=LAYER_AXES_MODES)
    (0,)
    """
    if isinstance(axes, str):
        if axes in modes:
            return modes[axes](ndim)
        known = ", ".join(repr(m) for m in modes)
        raise ValueError(
            f"{what}={axes!r} is not a known mode: expected {known}, an int or a tuple of ints"
        )
    if isinstance(axes, np.ndarray) and axes.ndim == 0:
        axes = axes[()]
    if isinstance(axes, numbers.Integral) and not isinstance(axes, bool | np.bool_):
        items = [axes]
    elif isinstance(axes, Sequence | np.ndarray):
        items = list(np.ravel(axes)) if isinstance(axes, np.ndarray) else list(axes)
    else:
        known = ", ".join(repr(m) for m in modes)
        raise TypeError(
            f"{what}={axes!r} ({type(axes).__name__}) must be {known}, an int or a tuple of ints"
        )
    for a in items:
        if isinstance(a, bool | np.bool_) or not isinstance(a, numbers.Integral):
            raise TypeError(f"{what}={axes!r} must contain only ints, not {a!r}")
    given = tuple(int(a) for a in items)
    if not given and not allow_empty:
        raise ValueError(f"{what}=() is empty: batch normalization needs at least one axis")
    if any(not -ndim <= a < ndim for a in given):
        raise ValueError(
            f"{what}={given!r} is out of range for inputs with ndim={ndim}: expected "
            f"axes in [{-ndim}, {ndim - 1}]"
        )
    result = tuple(sorted(a % ndim for a in given))
    if len(set(result)) != len(result):
        raise ValueError(f"{what}={given!r} repeats an axis: each axis may appear once")
    return result


# --------------------------------------------------------------------------
# scalar ranges


def _shown(value) -> str:
    """A number as the messages show it: ``5``, ``-1.0``, ``nan`` (never ``np.float64(..)``)."""
    if isinstance(value, np.ndarray):
        value = value[()] if value.ndim == 0 else value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        return str(int(value))
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return repr(value)


class OutOfRange(ValueError):
    """A scalar argument out of its rule's range (a ``ValueError``).

    Built from the parts of the message: ``OutOfRange("epsilon", -1.0,
    "(0.0, inf)")``.  With one argument it is that message (PyTensor's C
    linker re-raises an error as its type called on the message).
    """

    def __init__(self, name: str, *value_and_allowed):
        if not value_and_allowed:
            super().__init__(name)
            return
        value, allowed = value_and_allowed
        super().__init__(f"{name}={_shown(value)} is out of range: expected a value in {allowed}")


@dataclasses.dataclass(frozen=True)
class Range:
    """The allowed values of a scalar argument: ``low <= v <= high`` (or ``low < v``).

    ``nan`` is never allowed, ``inf`` only with ``allow_inf``.  One rule
    gives the graph-time check, the run-time one (:meth:`check`) and the
    same test for each backend (:meth:`holds`, :meth:`source`,
    :meth:`c_source`).
    """

    name: str
    low: float
    high: float
    low_open: bool = False
    allow_inf: bool = False

    def named(self, name: str) -> Range:
        """The same rule for an argument called ``name`` (``alpha``)."""
        return dataclasses.replace(self, name=name)

    def describe(self) -> str:
        """``'(0.0, inf)'``, ``'[0.0, 1.0]'``: the allowed values."""
        lo = "(" if self.low_open else "["
        hi = "]" if math.isfinite(self.high) or self.allow_inf else ")"
        return f"{lo}{float(self.low)}, {float(self.high)}{hi}"

    def error(self, value) -> OutOfRange:
        """The error for ``value`` (the same in every mode)."""
        return OutOfRange(self.name, value, self.describe())

    def holds(self, value, xp=np):
        """Whether ``value`` is allowed, with ``xp``'s ops (NumPy, ``jax.numpy``)."""
        above = value > self.low if self.low_open else value >= self.low
        ok = above & (value <= self.high)
        return ok & (~xp.isnan(value) if self.allow_inf else xp.isfinite(value))

    def check(self, value) -> None:
        """Raise the rule's ``ValueError`` for a bad number (the run-time check)."""
        if not bool(self.holds(np.float64(value))):
            raise self.error(value)

    def source(self, var: str) -> str:
        """A Python (Numba) expression that is True when the float ``var`` is allowed."""
        op = ">" if self.low_open else ">="
        end = f"{var} == {var}" if self.allow_inf else f"np.isfinite({var})"
        return f"({var} {op} {float(self.low)!r} and {var} <= {self._high_src()} and {end})"

    def c_source(self, var: str) -> str:
        """A C expression (``<math.h>``) that is nonzero when the double ``var`` is allowed."""
        op = ">" if self.low_open else ">="
        high = "INFINITY" if math.isinf(self.high) else repr(float(self.high))
        end = f"!isnan({var})" if self.allow_inf else f"isfinite({var})"
        return f"({var} {op} {float(self.low)!r} && {var} <= {high} && {end})"

    def _high_src(self) -> str:
        return "np.inf" if math.isinf(self.high) else repr(float(self.high))


#: Added to the variance before the square root.
EPSILON = Range("epsilon", 0.0, math.inf, low_open=True)
#: The weight of a batch in the running averages.
RUNNING_AVERAGE_FACTOR = Range("running_average_factor", 0.0, 1.0)
#: The same weight as :class:`~lasagne_bn.layers.BatchNormLayer` calls it.
ALPHA = RUNNING_AVERAGE_FACTOR.named("alpha")
#: Batch renormalization's clipping bounds (``inf``: no clipping).
R_MAX = Range("r_max", 1.0, math.inf, allow_inf=True)
D_MAX = Range("d_max", 0.0, math.inf, allow_inf=True)

#: Every rule by name (the C code's errors look their rule up here).
RULES: dict[str, Range] = {
    r.name: r for r in (EPSILON, RUNNING_AVERAGE_FACTOR, ALPHA, R_MAX, D_MAX)
}


def constant_value(var: Variable) -> float | None:
    """The number a scalar graph holds if it is constant (through casts), else None."""
    try:
        return get_underlying_scalar_constant_value(var)
    except NotScalarConstantError:
        return None


def check_scalar(value, rule: Range):
    """Graph-build check of a scalar argument: a real number, or a scalar tensor.

    A number, or a tensor with a constant value, is range-checked now; a
    symbolic one is checked when the graph runs (by the Op it reaches).
    Returns ``value`` unchanged.

    Raises
    ------
    TypeError
        For anything but a real number or a real scalar tensor.
    ValueError
        For a value out of ``rule``'s range, or a tensor with ``ndim > 0``.

    Examples
    --------
    >>> check_scalar(0.1, RUNNING_AVERAGE_FACTOR.named("alpha"))
    0.1
    >>> try:
    ...     check_scalar(pt.constant(5.0), RUNNING_AVERAGE_FACTOR)
    ... except ValueError as error:
    ...     print(error)
    running_average_factor=5.0 is out of range: expected a value in [0.0, 1.0]
    """
    if isinstance(value, Variable):
        if value.ndim != 0:
            raise ValueError(f"{rule.name} must be a scalar, got a {value.ndim}-d tensor")
        dtype = value.type.dtype
        if dtype not in FLOAT_DTYPES and not dtype.startswith(("int", "uint")):
            raise TypeError(f"{rule.name} has dtype {dtype}; expected a real number")
        number = constant_value(value)
        if number is not None and not bool(rule.holds(np.float64(number))):
            raise rule.error(number)
        return value
    number = value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value
    if not isinstance(number, numbers.Real) or isinstance(number, bool | np.bool_):
        raise TypeError(f"{rule.name}={value!r} must be a real number or a scalar tensor")
    if not bool(rule.holds(np.float64(number))):
        raise rule.error(number)
    return value


def scalar_input(value, rule: Range) -> Variable:
    """``value`` checked (:func:`check_scalar`) as a float64 scalar graph input of an Op."""
    check_scalar(value, rule)
    return pt.cast(pt.as_tensor_variable(value), "float64")


# --------------------------------------------------------------------------
# the run-time check of a symbolic scalar that no batch-norm Op checks


def raise_out_of_range(name: str, value: float) -> None:
    """Raise rule ``name``'s error for ``value`` (the C code calls this)."""
    RULES[name].check(value)
    raise AssertionError(f"{name}={value!r} failed the C range test but passes {RULES[name]}")


class RangeCheck(COp):
    """The identity on a scalar, which refuses a value out of ``rule``'s range when run.

    For symbolic layer arguments that reach no batch-norm Op (``alpha`` of
    ``stat_storage='inv_std'``, ``r_max``, ``d_max``): the same test and
    error as the Ops' own checks, in every mode (``perform``, Numba and JAX
    registrations in :mod:`lasagne_bn.ops.numba.bn` and :mod:`lasagne_bn.ops.jax.bn`,
    C code here).  Use :func:`checked`, which adds it only when needed.
    """

    __props__ = ("rule",)
    view_map = {0: [0]}
    _f16_ok = True

    def __init__(self, rule: Range):
        self.rule = rule

    def __str__(self):
        return f"RangeCheck{{{self.rule.name} in {self.rule.describe()}}}"

    def make_node(self, value):
        ensure_registered("jax")  # the JAX kernels, once per process
        value = pt.as_tensor_variable(value)
        if value.ndim != 0:
            raise ValueError(f"{self.rule.name} must be a scalar, got a {value.ndim}-d tensor")
        return Apply(self, [value], [value.type()])

    def perform(self, node, inputs, output_storage):
        self.rule.check(inputs[0])
        output_storage[0][0] = inputs[0]

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [shapes[0]]

    def pullback(self, inputs, outputs, cotangents):
        return list(cotangents)

    def c_code(self, node, name, inputs, outputs, sub):
        (x,), (out,) = inputs, outputs
        dtype = node.inputs[0].type.dtype_specs()[1]
        fail = sub["fail"]
        return f"""
        {{
            const double v = (double)(({dtype}*)PyArray_DATA({x}))[0];
            if (!{self.rule.c_source("v")}) {{
                PyObject* m = PyImport_ImportModule("lasagne_bn.ops.validation");
                if (m != NULL) {{
                    PyObject* r = PyObject_CallMethod(
                        m, "raise_out_of_range", "sd", "{self.rule.name}", v);
                    Py_XDECREF(r);
                    Py_DECREF(m);
                }}
                {fail}
            }}
            Py_XDECREF({out});
            {out} = {x};
            Py_INCREF({out});
        }}
        """

    def c_headers(self, **kwargs):
        return ["<math.h>"]

    def c_code_cache_version(self):
        return (1, self.rule.c_source("v"))


def checked(value, rule: Range):
    """``value``, range-checked now if it is a number or constant, else when the graph runs.

    A symbolic scalar is wrapped in :class:`RangeCheck`; anything else is
    returned as it is (after :func:`check_scalar`).

    >>> import pytensor
    >>> f = pytensor.function([a := pt.dscalar("alpha")], checked(a, ALPHA) * 2)
    >>> try:
    ...     f(1.5)
    ... except ValueError as error:  # PyTensor appends its notes on the node
    ...     print(str(error).splitlines()[0])
    alpha=1.5 is out of range: expected a value in [0.0, 1.0]
    """
    check_scalar(value, rule)
    if isinstance(value, Variable) and constant_value(value) is None:
        return RangeCheck(rule)(value)
    return value
