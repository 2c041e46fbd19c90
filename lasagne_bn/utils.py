"""Small helpers shared by the layers, initializers and update rules.

The names, signatures and defaults follow ``lasagne.utils``.  Two helpers
are new, because PyTensor 3 needs them:

- :func:`portable_shared` creates a shared variable whose value stays a
  writable NumPy array whichever backend last updated it, so one set of
  parameters can be used by functions compiled for JAX, Numba, C and
  ``FAST_COMPILE`` in any order.
- :func:`set_default_update` attaches a ``default_update`` (the mechanism
  Lasagne's running averages rely on) without leaking PyTensor 3's
  ``DeprecationWarning`` to the user, and with the exact type PyTensor needs.

>>> import numpy as np
>>> from lasagne_bn.utils import create_param
>>> W = create_param(np.zeros((3, 2)), (3, 2), name='W')
>>> W.type.shape, W.name
((3, 2), 'W')
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from inspect import signature
from typing import TYPE_CHECKING, Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.tensor.type import TensorType

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from pytensor.graph.type import Type

    from lasagne_bn._typing import ParamSpec, TensorLike

__all__ = [
    "as_theano_expression",
    "as_tuple",
    "collect_shared_vars",
    "compute_norms",
    "create_param",
    "floatX",
    "inspect_kwargs",
    "int_types",
    "is_portable",
    "match_type",
    "one_hot",
    "portable_shared",
    "set_default_update",
    "shared_empty",
    "sum_terms",
    "unique",
    "unroll_scan",
]

#: Types accepted wherever an integer is expected (Python and NumPy ints).
int_types = (numbers.Integral, np.integer)


def sum_terms(terms: Iterable) -> Variable | float:
    """The sum of ``terms``, built so that every compilation mode runs it.

    Python's ``sum`` gives a chain of additions that PyTensor flattens into
    one ``add`` with an input per term; with more than 31 inputs
    ``FAST_COMPILE`` and the python linker fail (PyTensor 3.0.7: NumPy
    ufuncs take at most 32 operands).  Many scalar terms (an L2 penalty over
    every parameter) are summed as a dot product with ones instead, which
    no rewrite turns back into one wide ``add``.  Few terms, or non-scalar
    ones, are added as Python's ``sum`` would (``0`` for no terms).

    Examples
    --------
    >>> w = [pytensor.shared(np.ones(2) * i) for i in range(40)]
    >>> float(sum_terms([pt.sum(v) for v in w]).eval(mode="FAST_COMPILE"))
    1560.0
    """
    terms = list(terms)
    tensors = [t for t in terms if isinstance(t, Variable)]
    if len(terms) <= 4 or len(tensors) != len(terms) or any(t.ndim != 0 for t in tensors):
        return sum(terms)
    stacked = pt.stack(terms)
    return pt.dot(pt.ones((len(terms),), dtype=stacked.dtype), stacked)


def floatX(arr: ArrayLike) -> np.ndarray:
    """Return ``arr`` as a NumPy array of dtype ``pytensor.config.floatX``.

    Examples
    --------
    >>> floatX([1, 2]).dtype == np.dtype(pytensor.config.floatX)
    True
    """
    return np.asarray(arr, dtype=pytensor.config.floatX)


# --------------------------------------------------------------------------
# shared variables that every backend can read and update


def _host_value(value: Any) -> Any:
    """The value as a writable NumPy array when it is an array of any kind.

    JAX functions leave ``jax.Array`` objects in the storage of the shared
    variables they update; the Numba backend cannot read those, and a
    zero-copy NumPy view of them is read-only memory that the C and Numba
    backends would then update in place.  A writable copy is the one form
    every backend reads and may overwrite.
    """
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if value is None or isinstance(value, np.generic | np.random.Generator | numbers.Number):
        return value
    if hasattr(value, "__array__"):
        return np.array(value)
    return value


class _HostStorage(list):
    """A container storage cell that converts what is written into it.

    PyTensor functions write updated values straight into the storage list
    of a shared variable's container (``storage[0] = value``); overriding
    ``__setitem__`` is the one place that sees every write, whichever
    backend made the value.
    """

    __slots__ = ()

    def __setitem__(self, index, value):
        list.__setitem__(self, index, _host_value(value))


def portable_shared(
    value: ArrayLike,
    name: str | None = None,
    shape: Sequence[int | None] | None = None,
    borrow: bool = False,
) -> SharedVariable:
    """A shared variable usable by functions compiled for any backend.

    Like ``pytensor.shared``, except that whatever a compiled function
    writes into it is stored as a writable NumPy array.  This is what lets
    a network be trained under ``mode="JAX"`` and then evaluated under the
    default Numba mode, the C backend or ``FAST_COMPILE`` in the same
    process (PyTensor 3.0.7 otherwise leaves a ``jax.Array`` in the
    variable, which Numba rejects).  All parameters that :mod:`lasagne_bn`
    creates are made this way.

    Parameters
    ----------
    value : array_like
        Initial value.
    name : str, optional
        Name of the variable.
    shape : tuple of int or None, optional
        Static shape; ``None`` entries are unknown sizes.  By default every
        size is unknown, as with ``pytensor.shared``.
    borrow : bool
        Use ``value`` without copying it.

    Examples
    --------
    >>> import numpy as np
    >>> w = portable_shared(np.ones(3), name='w', shape=(3,))
    >>> w.type.shape
    (3,)
    """
    kwargs = {} if shape is None else {"shape": tuple(shape)}
    var = pytensor.shared(value, name=name, borrow=borrow, **kwargs)
    container = var.container
    container.storage = _HostStorage(container.storage)
    container.storage[0] = container.storage[0]  # make a read-only start value writable
    return var


def is_portable(var: Variable) -> bool:
    """Whether ``var`` is a shared variable made by :func:`portable_shared`.

    Examples
    --------
    >>> is_portable(portable_shared(np.zeros(2))), is_portable(pytensor.shared(np.zeros(2)))
    (True, False)
    """
    return isinstance(var, SharedVariable) and isinstance(var.container.storage, _HostStorage)


def shared_empty(dim: int = 2, dtype: str | None = None) -> SharedVariable:
    """A shared variable of ``dim`` dimensions, each of size 1, filled with zeros.

    Examples
    --------
    >>> shared_empty(3).get_value().shape
    (1, 1, 1)
    """
    if dtype is None:
        dtype = pytensor.config.floatX
    shape = (1,) * dim
    return portable_shared(np.zeros(shape, dtype=dtype))


_DEFAULT_UPDATE_DEPRECATION = "Setting default_update is deprecated"


def set_default_update(var: SharedVariable, update: Variable) -> None:
    """Give ``var`` a default update, the way Lasagne's running averages work.

    PyTensor applies a shared variable's ``default_update`` in every
    function whose graph reads the variable, unless the function's
    ``updates`` name it.  PyTensor 3.0.7 deprecates setting it (with a
    ``DeprecationWarning``) but still honours it; this helper silences
    exactly that warning, and casts / pins the static shape of ``update``
    so its type is exactly ``var.type`` (PyTensor rejects anything else
    when the function is compiled, with a less clear message).

    Parameters
    ----------
    var : SharedVariable
        The variable to update.
    update : TensorVariable
        Its new value, a graph of the same ndim.

    Raises
    ------
    TypeError
        If ``var`` is not a shared variable, or ``update`` cannot be given
        ``var``'s type (other ndim, or a static shape that disagrees).

    Examples
    --------
    >>> import numpy as np, pytensor
    >>> count = portable_shared(np.zeros(()), name='count')
    >>> set_default_update(count, count + 1)
    >>> f = pytensor.function([], count)
    >>> _ = f(); _ = f()
    >>> float(count.get_value())
    2.0
    """
    if not isinstance(var, SharedVariable):
        raise TypeError(
            f"var={var!r} ({type(var).__name__}) must be a shared variable to carry a "
            "default update"
        )
    update = match_type(update, var.type, what=f"the default update of {var}")
    from lasagne_bn.ops.rewrites import ensure_registered

    # Lasagne's running averages update a memory-aliased clone: the rewrite
    # that keeps such graphs right is registered from the first one on.
    ensure_registered("aliasing")
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=_DEFAULT_UPDATE_DEPRECATION, category=DeprecationWarning
        )
        var.default_update = update


def match_type(expr: TensorLike, target_type: Type, what: str = "expression") -> Variable:
    """Cast ``expr`` and pin its static shape so that its type is ``target_type``.

    PyTensor 3 infers static shapes eagerly and requires updates to have
    exactly their variable's type.  A more specific static shape than the
    target's cannot be loosened, so it is an error here.

    Examples
    --------
    >>> from pytensor.tensor.type import TensorType
    >>> target = TensorType('float32', shape=(3,))
    >>> match_type(np.zeros(3), target).type == target
    True
    >>> try:
    ...     match_type(np.zeros(4), target)
    ... except TypeError as error:
    ...     print(error)
    expression has static shape (4,); expected shape (3,) (size 3 on axis 0)
    """
    if isinstance(expr, Variable) and expr.type == target_type:
        return expr
    if not isinstance(target_type, TensorType):
        raise TypeError(
            f"{what} has type {getattr(expr, 'type', type(expr))}; expected {target_type}"
        )
    expr = pt.as_tensor_variable(expr)
    if expr.ndim != target_type.ndim:
        raise TypeError(f"{what} has type {expr.type}; expected type {target_type} (same ndim)")
    if expr.type.dtype != target_type.dtype:
        expr = pt.cast(expr, target_type.dtype)
    want = target_type.shape
    have = expr.type.shape
    for axis, (w, h) in enumerate(zip(want, have, strict=True)):
        if w is not None and h is not None and w != h:
            raise TypeError(
                f"{what} has static shape {have}; expected shape {want} (size {w} on axis {axis})"
            )
    if any(w is not None and h is None for w, h in zip(want, have, strict=True)):
        expr = pt.specify_shape(expr, want)
    if expr.type != target_type:
        raise TypeError(
            f"{what} has type {expr.type}, which is more specific than {target_type}; "
            "give the variable a static shape (create it with lasagne_bn.utils.create_param "
            "or portable_shared(..., shape=...))"
        )
    return expr


# --------------------------------------------------------------------------
# expressions and collections


def as_theano_expression(input: TensorLike) -> Variable:
    """Wrap ``input`` as a constant unless it is already a graph variable.

    The name is Lasagne's; PyTensor variables are what Theano's were.

    Examples
    --------
    >>> float(as_theano_expression(3.0).data)
    3.0
    """
    if isinstance(input, Variable):
        return input
    try:
        return pt.constant(input)
    except Exception as exc:
        raise TypeError(
            f"input of type {type(input).__name__} is not a PyTensor expression and cannot "
            f"be wrapped as a constant ({exc})"
        ) from exc


as_tensor_expression = as_theano_expression


def collect_shared_vars(expressions: Variable | Sequence[Variable]) -> list[SharedVariable]:
    """All shared variables the given expression(s) depend on, in order of appearance.

    The order is that of a left-to-right depth-first walk, so a list of
    shared variables comes back in its own order (without repeats).

    Examples
    --------
    >>> import pytensor
    >>> x, y = pytensor.shared(1.0, name='x'), pytensor.shared(2.0, name='y')
    >>> [v.name for v in collect_shared_vars(y * x + y)]
    ['y', 'x']
    """
    if isinstance(expressions, Variable):
        expressions = [expressions]
    result: list[SharedVariable] = []
    seen: set[int] = set()
    stack = list(reversed(list(expressions)))
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        if isinstance(var, SharedVariable):
            result.append(var)
        elif var.owner is not None:
            stack.extend(reversed(var.owner.inputs))
    return result


def one_hot(x: TensorLike, m: int | Variable | None = None) -> Variable:
    """One-hot matrix of the integer vector ``x`` with ``m`` columns.

    ``m`` defaults to ``max(x) + 1``.

    Examples
    --------
    >>> one_hot(pt.as_tensor([0, 2]), 3).eval()
    array([[1., 0., 0.],
           [0., 0., 1.]])
    """
    x = pt.as_tensor_variable(x)
    if m is None:
        m = pt.cast(pt.max(x) + 1, "int32")
    return pt.eye(m, dtype=pytensor.config.floatX)[pt.cast(x, "int32")]


def unique(l: Iterable) -> list:
    """The items of ``l`` without repeats, in order of first appearance.

    Examples
    --------
    >>> unique([3, 1, 3, 2, 1])
    [3, 1, 2]
    """
    result = []
    seen = set()
    for item in l:
        if item not in seen:
            result.append(item)
            seen.add(item)
    return result


def as_tuple(x: Any, N: int, t: type | tuple[type, ...] | None = None) -> tuple:
    """``x`` as a tuple of length ``N``: an iterable is checked, a value repeated.

    Parameters
    ----------
    x : value or iterable
    N : int
        Required length.
    t : type or tuple of types, optional
        Required type of every item.

    Raises
    ------
    TypeError
        If an item is not of type ``t``.
    ValueError
        If an iterable does not have length ``N``.

    Examples
    --------
    >>> as_tuple(3, 2)
    (3, 3)
    """
    try:
        X = tuple(x)
    except TypeError:
        X = (x,) * N
    if t is not None and not all(isinstance(v, t) for v in X):
        if t == int_types:
            expected = "int"
        elif isinstance(t, tuple):
            expected = " or ".join(tt.__name__ for tt in t)
        else:
            expected = t.__name__
        raise TypeError(f"expected a single value or an iterable of {expected}, got {x} instead")
    if len(X) != N:
        raise ValueError(
            f"expected a single value or an iterable with length {N}, got {x} instead"
        )
    return X


def inspect_kwargs(func: Callable) -> list[str]:
    """Names of the arguments of ``func`` that have a default value.

    Examples
    --------
    >>> inspect_kwargs(lambda a, b=1, *args, c=2, **kw: 0)
    ['b', 'c']
    """
    params = signature(func).parameters
    return [p.name for p in params.values() if p.default is not p.empty]


def compute_norms(
    array: np.ndarray | Variable, norm_axes: Sequence[int] | None = None
) -> np.ndarray | Variable:
    """Norms of the slices of ``array`` (a NumPy array or a tensor).

    By default, as in Lasagne: no reduction (absolute values) for 1-d
    arrays, over axis 0 for 2-d (dense weights), over all axes but the first
    for 3- to 5-d (convolution weights).

    Examples
    --------
    >>> compute_norms(np.array([[3.0], [4.0]]))
    array([5.])
    """
    if not isinstance(array, Variable | np.ndarray):
        raise RuntimeError(
            f"Unsupported type {type(array).__name__}: only PyTensor variables and NumPy "
            "arrays are supported"
        )
    ndim = array.ndim
    if norm_axes is not None:
        sum_over = tuple(norm_axes)
    elif ndim == 1:
        sum_over = ()
    elif ndim == 2:
        sum_over = (0,)
    elif ndim in (3, 4, 5):
        sum_over = tuple(range(1, ndim))
    else:
        raise ValueError(f"Unsupported tensor dimensionality {ndim}: norm_axes must be given")
    if isinstance(array, Variable):
        if not sum_over:
            return pt.abs(array)
        return pt.sqrt(pt.sum(array**2, axis=sum_over))
    if not sum_over:
        return abs(array)
    return np.sqrt(np.sum(array**2, axis=sum_over))


# --------------------------------------------------------------------------
# parameters


_INITIALIZER_HOOK: ContextVar[Callable | None] = ContextVar(
    "lasagne_bn_initializer_hook", default=None
)


@contextmanager
def initializer_hook(hook: Callable[[tuple, str | None], None]) -> Iterator[None]:
    """Call ``hook(shape, name)`` before :func:`create_param` runs an initializer.

    Inside the block, every parameter about to be filled by a callable
    (rather than given as an array or variable) is first shown to ``hook``,
    which may raise to refuse it before anything is allocated: a loader
    rebuilding a network from a file uses it so that the file cannot make
    it allocate what the file does not hold.

    >>> from lasagne_bn.init import Constant
    >>> seen = []
    >>> with initializer_hook(lambda shape, name: seen.append(shape)):
    ...     _ = create_param(Constant(0.0), (2, 3), name='W')
    >>> seen
    [(2, 3)]
    """
    token = _INITIALIZER_HOOK.set(hook)
    try:
        yield
    finally:
        _INITIALIZER_HOOK.reset(token)


def create_param(spec: ParamSpec, shape: Sequence[int], name: str | None = None) -> Variable:
    """Create a parameter of the given shape from ``spec``, or check a given one.

    ``spec`` may be

    - a NumPy array (or a number): it becomes a shared variable (made by
      :func:`portable_shared`) with the full static shape ``shape``;
    - a shared variable or any PyTensor expression: it is used as it is,
      after checking its ndim (and its static shape, where known), and it
      gets ``name`` if it has none;
    - a callable (an initializer from :mod:`lasagne_bn.init`): it is called
      with ``shape`` and its result is treated as above.

    Raises
    ------
    ValueError
        For a non-positive size, or a spec of the wrong shape or ndim.
    TypeError
        For a spec (or a callable's result) of any other kind.

    Examples
    --------
    >>> from lasagne_bn.init import Constant
    >>> b = create_param(Constant(0.5), (2,), name='b')
    >>> b.get_value().tolist()
    [0.5, 0.5]
    """
    shape = tuple(shape)
    if any(d is None or d <= 0 for d in shape):
        raise ValueError(
            f"cannot create param with a non-positive shape dimension: shape={shape!r}, "
            f"name={name!r}"
        )
    err_prefix = f"cannot initialize parameter {name}: "
    if callable(spec):
        hook = _INITIALIZER_HOOK.get()
        if hook is not None:
            hook(shape, name)
        spec = spec(shape)
        what = "the {} returned by the provided callable"
    else:
        what = "the provided {}"
    if isinstance(spec, numbers.Number) or (
        isinstance(spec, np.generic) and spec.dtype.kind in "biufc"
    ):
        spec = np.asarray(spec)
    if isinstance(spec, np.ndarray):
        if spec.shape != shape:
            raise ValueError(
                err_prefix + what.format("numpy array") + f" has shape {spec.shape}, "
                f"should be {shape}"
            )
        # Parameters keep their shape (Lasagne assumes so too); a full static
        # shape lets PyTensor infer shapes, and makes update expressions have
        # exactly the variable's type.
        return portable_shared(spec, name=name, shape=shape)
    if isinstance(spec, Variable):
        if spec.ndim != len(shape):
            raise ValueError(
                err_prefix + what.format("PyTensor variable") + f" has {spec.ndim} "
                f"dimensions, should be {len(shape)}"
            )
        static = getattr(spec.type, "shape", (None,) * len(shape))
        for axis, (have, want) in enumerate(zip(static, shape, strict=True)):
            if have is not None and have != want:
                raise ValueError(
                    err_prefix + what.format("PyTensor variable") + f" has static shape "
                    f"{static}, should be {shape} (axis {axis})"
                )
        if isinstance(spec, SharedVariable):
            value_shape = np.shape(spec.get_value(borrow=True))
            if value_shape != shape:
                raise ValueError(
                    err_prefix + what.format("shared variable") + f" holds a value of shape "
                    f"{value_shape}, should be {shape}"
                )
        if not spec.name:
            spec.name = name
        return spec
    if "callable" in what:
        raise TypeError(
            err_prefix + what.format("value") + f" ({type(spec).__name__}) is not a numpy "
            "array or a PyTensor expression"
        )
    raise TypeError(
        err_prefix + f"the provided spec ({type(spec).__name__}) is not a numpy array, "
        "a PyTensor expression, or a callable"
    )


# --------------------------------------------------------------------------
# loops


def unroll_scan(
    fn: Callable,
    sequences: Sequence[Variable],
    outputs_info: Sequence[Variable],
    non_sequences: Sequence[Variable],
    n_steps: int,
    go_backwards: bool = False,
) -> list[Variable]:
    """A ``scan`` loop written out step by step in the graph (no Scan Op).

    Lasagne's helper, with the meaning of ``pytensor.scan``'s arguments:
    ``fn(*sequence_slices, *previous_outputs, *non_sequences)`` is called
    ``n_steps`` times (a Python int), and the results of each output are
    stacked along a new first axis, in the order the steps ran.  There is
    no ``truncate_gradient``.  A long unrolled loop compiles slowly, but
    each step can then be fused and scheduled like any other graph.

    Parameters
    ----------
    fn : callable
        The step function; returns one expression or a list/tuple of them,
        one per entry of ``outputs_info``.
    sequences : expression or list of expressions
        Iterated over their first axis.
    outputs_info : list
        Initial values of the recurrent outputs (expressions or numbers).
    non_sequences : list
        Passed unchanged to every call of ``fn``.
    n_steps : int
        Number of steps.
    go_backwards : bool
        Start at the last item of the sequences and step towards the first.

    Returns
    -------
    list of expressions
        One per output: its values at each step, stacked on axis 0.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> a = pt.scalar('a')
    >>> powers, = unroll_scan(lambda i, prev, a: prev * a, pt.arange(3), [1.0], [a], 3)
    >>> powers.eval({a: 2.0}).tolist()
    [2.0, 4.0, 8.0]
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int_types) or n_steps <= 0:
        raise ValueError(f"n_steps={n_steps!r} must be a positive int to unroll a loop")
    if not isinstance(sequences, list | tuple):
        sequences = [sequences]
    previous = list(outputs_info)
    non_sequences = list(non_sequences)
    steps = range(n_steps - 1, -1, -1) if go_backwards else range(n_steps)
    per_step = []
    for i in steps:
        out = fn(*[seq[i] for seq in sequences], *previous, *non_sequences)
        out = list(out) if isinstance(out, list | tuple) else [out]
        per_step.append(out)
        previous = out
    return [pt.stack([step[k] for step in per_step]) for k in range(len(per_step[0]))]
