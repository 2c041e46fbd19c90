"""Batch-norm statistics in the ``inv_std`` and ``var`` storages: the conversions.

A :class:`~lasagne_bn.layers.BatchNormLayer` stores either Lasagne's
``inv_std = 1 / sqrt(var + epsilon)`` or the variance itself; these
functions convert arrays and one layer's statistic between the two, in
float64.  They know layers only by their attributes (``stat_storage``,
``epsilon``, ``name``), so both the layer (:mod:`.normalization`) and the
network-wide conversions (:mod:`.bn_storage`) use them.
"""

from __future__ import annotations

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable

from lasagne_bn.ops.validation import EPSILON, check_scalar

#: The two storages of the second statistic.
STAT_STORAGES = ("inv_std", "var")


def _check_storage(value, what: str, allow_none: bool = False):
    if value is None and allow_none:
        return value
    if value not in STAT_STORAGES:
        expected = "'inv_std' or 'var'" + (" (or None)" if allow_none else "")
        raise ValueError(f"{what}={value!r} is not a statistic storage: expected {expected}")
    return value


def _check_epsilon(epsilon) -> float:
    if isinstance(epsilon, Variable):
        raise TypeError(f"epsilon={epsilon!r} must be a number here")
    return float(check_scalar(epsilon, EPSILON))  # the layers' and Ops' rule


def _as_float_array(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} has dtype {array.dtype}; expected a real floating-point array")
    return array


def _result_dtype(array: np.ndarray):
    return array.dtype if array.dtype.kind == "f" else np.dtype("float64")


def inv_std_to_var(inv_std, epsilon: float) -> np.ndarray:
    """The variance that a stored ``inv_std`` stands for: ``1 / inv_std**2 - epsilon``.

    Computed in float64 and returned in the input's dtype.  ``inv_std`` is
    at most ``1 / sqrt(epsilon)`` for any true variance; values just above
    that (rounding) give variance 0, values clearly above it are refused.

    Raises
    ------
    ValueError
        If a value is not finite and > 0.

    >>> inv_std_to_var(np.array([0.5, 1.0]), 1e-4).tolist()
    [3.9999, 0.9999]
    """
    epsilon = _check_epsilon(epsilon)
    array = _as_float_array(inv_std, "inv_std")
    wide = array.astype(np.float64)
    bad = ~(np.isfinite(wide) & (wide > 0))
    if bad.any():
        first = float(wide[bad].flat[0])
        raise ValueError(
            f"inv_std holds {int(bad.sum())} value(s) that are not finite and > 0 (e.g. "
            f"{first!r}); an inverse standard deviation must be positive"
        )
    var = 1.0 / np.square(wide) - epsilon
    # inv_std <= 1/sqrt(epsilon) for every variance; only rounding may overshoot
    impossible = var < -INV_STD_SLACK * epsilon
    if impossible.any():
        first = float(wide[impossible].flat[0])
        raise ValueError(
            f"inv_std holds {int(impossible.sum())} value(s) above 1/sqrt(epsilon) = "
            f"{1 / np.sqrt(epsilon):.6g} (e.g. {first!r}), which no variance gives: the "
            "statistics were saved with a smaller epsilon, or they are not inv_std"
        )
    return np.maximum(var, 0.0).astype(_result_dtype(array))


#: How far (relative to epsilon) 1/inv_std**2 - epsilon may fall below 0 by
#: rounding before an inv_std is called impossible (float32 rounding is ~1e-7).
INV_STD_SLACK = 1e-3


def check_statistic(values, storage: str, name: str = "statistic") -> None:
    """Refuse values no batch-norm layer could hold as ``storage`` (inv_std > 0, var >= 0).

    Raises
    ------
    ValueError
        If a value is not finite, an ``inv_std`` is not > 0 or a ``var`` is
        negative; the message names ``name``.
    """
    wide = _as_float_array(values, name).astype(np.float64)
    ok = np.isfinite(wide) & ((wide > 0) if storage == "inv_std" else (wide >= 0))
    if not ok.all():
        first = float(wide[~ok].flat[0])
        rule = "finite and > 0" if storage == "inv_std" else "finite and >= 0"
        raise ValueError(
            f"{name}: {storage} holds {int((~ok).sum())} value(s) that are not {rule} (e.g. "
            f"{first!r})"
        )


def var_to_inv_std(var, epsilon: float) -> np.ndarray:
    """The stored ``inv_std`` for a variance: ``1 / sqrt(var + epsilon)``.

    Computed in float64 and returned in the input's dtype.

    Raises
    ------
    ValueError
        If a value is not finite, or ``var + epsilon`` is not > 0.

    >>> var_to_inv_std(np.array([3.9999, 0.9999]), 1e-4).tolist()
    [0.5, 1.0]
    """
    epsilon = _check_epsilon(epsilon)
    array = _as_float_array(var, "var")
    wide = array.astype(np.float64)
    bad = ~(np.isfinite(wide) & (wide + epsilon > 0))
    if bad.any():
        first = float(wide[bad].flat[0])
        raise ValueError(
            f"var holds {int(bad.sum())} value(s) that are not finite or not > -epsilon "
            f"(e.g. {first!r}); a variance must be >= 0"
        )
    return (1.0 / np.sqrt(wide + epsilon)).astype(_result_dtype(array))


def layer_epsilon(layer, epsilon: float | None = None) -> float:
    """The layer's epsilon as a number (``epsilon`` if given, which wins).

    A symbolic epsilon is accepted when it is a constant.

    Raises
    ------
    ValueError
        If the layer's epsilon is a symbolic expression with no constant
        value and no ``epsilon`` was given.
    """
    if epsilon is not None:
        return _check_epsilon(epsilon)
    value = layer.epsilon
    if isinstance(value, Variable):
        from pytensor.tensor.basic import get_underlying_scalar_constant_value
        from pytensor.tensor.exceptions import NotScalarConstantError

        try:
            value = float(get_underlying_scalar_constant_value(value))
        except NotScalarConstantError:
            raise ValueError(
                f"layer {layer.name!r} has a symbolic epsilon ({layer.epsilon}); pass "
                "epsilon=<number> to convert its statistics"
            ) from None
    return _check_epsilon(float(value))


def _to_storage(array, to: str, epsilon: float) -> np.ndarray:
    return inv_std_to_var(array, epsilon) if to == "var" else var_to_inv_std(array, epsilon)


def converted_statistic(layer, to: str, epsilon: float | None = None):
    """The layer's stored statistic expressed as ``to`` (the layer is not changed).

    What :meth:`BatchNormLayer.set_stat_storage` stores.

    Raises
    ------
    ValueError
        If the statistic is an expression rather than a shared variable, or
        its values cannot be converted; the message names the layer.
    """
    _check_storage(to, "to")
    old = getattr(layer, layer.stat_storage)
    if layer.stat_storage == to:
        return old.get_value()
    if not isinstance(old, SharedVariable):
        raise ValueError(
            f"layer {layer.name!r} stores its {layer.stat_storage} as an expression "
            f"({old}), not a shared variable; it cannot be converted"
        )
    try:
        return _to_storage(old.get_value(), to, layer_epsilon(layer, epsilon))
    except ValueError as exc:
        raise ValueError(f"layer {layer.name!r}: {exc}") from exc
