"""Normalization layers: :class:`BatchNormLayer` and :func:`batch_norm` (Lasagne
master's), :class:`LocalResponseNormalization2DLayer`,
:class:`StandardizationLayer`, :func:`instance_norm` and :func:`layer_norm`.

The layers hold parameters; the numerics are the batch-normalization ops of
:mod:`lasagne_bn.ops` (``batch_normalization_train`` / ``_test`` /
``batch_normalization``), so every backend runs its fused kernels.

Running averages
----------------
In training, :class:`BatchNormLayer` normalizes with the statistics of the
mini-batch and updates exponential moving averages of them, which
deterministic (test-time) outputs use.  Every new average, in both
storages, is :func:`lasagne_bn.ops.bn.running_average_update` (the formula
the training Op uses for Theano's ``running_mean``/``running_var``).  The
averages are kept current in one of two ways:

- the explicit way, for new code (``get_output(net, return_updates=True)``,
  or several calls inside ``collect_updates()``): the updates come back as
  a dict for ``pytensor.function(updates=...)`` and no ``default_update``
  is used (PyTensor 3 deprecates them).
- Lasagne's way, for legacy code (``get_output(net)``): the updates are
  ``default_update``\\ s of memory-aliased clones of the stored statistics,
  so any ``pytensor.function`` whose graph contains the training output
  updates them, with no extra argument.

>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_all_layers
>>> net = batch_norm(DenseLayer(InputLayer((None, 8)), 4, name='fc'))
>>> [type(l).__name__ for l in get_all_layers(net)]
['InputLayer', 'DenseLayer', 'BatchNormLayer', 'NonlinearityLayer']
>>> [l.name for l in get_all_layers(net)][1:]
['fc', 'fc_bn', 'fc_bn_nonlin']
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.gradient import zero_grad
from pytensor.graph.basic import Variable
from pytensor.tensor.type import TensorType

from lasagne_bn import init, nonlinearities, utils
from lasagne_bn.layers.base import Layer
from lasagne_bn.layers.bn_statistics import STAT_STORAGES, converted_statistic
from lasagne_bn.layers.helper import active_updates, add_update
from lasagne_bn.ops import (
    batch_normalization,
    batch_normalization_test,
    batch_normalization_train,
)
from lasagne_bn.ops.bn import running_average_update, symbolic_m
from lasagne_bn.ops.layout import broadcast_pattern
from lasagne_bn.ops.statistics import Moments, normalize
from lasagne_bn.ops.validation import (
    ALPHA,
    D_MAX,
    EPSILON,
    LAYER_AXES_MODES,
    R_MAX,
    check_scalar,
    checked,
    normalize_axes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming, ParamSpec

__all__ = [
    "BatchNormLayer",
    "GroupNormLayer",
    "LocalResponseNormalization2DLayer",
    "StandardizationLayer",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
]


# Default initializers, kept as objects so that an explicitly passed
# ``inv_std`` / ``var`` can be told from the default.
_DEFAULT_INV_STD = init.Constant(1)
_DEFAULT_VAR = init.Constant(1)


def _normalize_axes(axes, ndim: int, what: str = "axes") -> tuple[int, ...]:
    """Lasagne's ``axes``: 'auto', an int or ints (negative ones from the end),
    sorted; ``()`` (normalize over nothing, as NumPy reduces over no axis) is
    allowed, as Lasagne allowed it.  The rule is the Ops' (one module)."""
    return normalize_axes(axes, ndim, what=what, modes=LAYER_AXES_MODES, allow_empty=True)


def _aliased_clone(var: Variable, shape: tuple[int, ...], layer_name) -> SharedVariable:
    """A second shared variable on ``var``'s memory, with the full static shape ``shape``.

    Lasagne's trick: a ``default_update`` on the clone updates the stored
    statistic only in functions whose graph contains the clone (training
    functions), never in functions that just read ``var``.  The clone's
    static shape is the parameter's, so update expressions have exactly its
    type, as PyTensor requires.
    """
    if not isinstance(var, SharedVariable):
        raise ValueError(
            f"cannot update the running average {var} of layer {layer_name!r}: it is a "
            f"{type(var).__name__}, not a shared variable; pass "
            "batch_norm_update_averages=False, or give the layer a shared variable or an array"
        )
    if var.type.shape != shape:
        value_shape = np.shape(var.get_value(borrow=True))
        if value_shape != shape:
            raise ValueError(
                f"the running average {var} of layer {layer_name!r} holds a value of shape "
                f"{value_shape}; expected {shape}"
            )
    clone_type = TensorType(var.type.dtype, shape=shape)
    clone = type(var)(
        name=var.name, type=clone_type, value=None, strict=None, container=var.container
    )
    clone.tag = copy.copy(var.tag)
    return clone


def _depends_on(value, *deps):
    """``value``, made to depend on ``deps`` in the graph without using them.

    Lasagne's running averages need their clones to be part of the training
    output's graph, so that PyTensor finds and applies their default
    updates, although the output does not use them.  ``second(d, v)`` is
    ``v`` (broadcast to the shape of a scalar ``d``): it costs nothing once
    rewrites remove it, a tiny reduction without them, and unlike Lasagne's
    ``v + 0 * d`` it cannot turn into NaN when a statistic is not finite.
    """
    value = pt.as_tensor_variable(value)
    for dep in deps:
        value = pt.second(pt.sum(dep), value)
    return value


def _add_shift_and_scale(layer, beta, gamma, shape) -> None:
    """Give ``layer`` its ``beta`` and ``gamma`` parameters (None: that one is absent)."""
    layer.beta = (
        None
        if beta is None
        else layer.add_param(beta, shape, "beta", trainable=True, regularizable=False)
    )
    layer.gamma = (
        None
        if gamma is None
        else layer.add_param(gamma, shape, "gamma", trainable=True, regularizable=True)
    )


class BatchNormLayer(Layer):
    """Batch normalization (Ioffe & Szegedy, 2015), as Lasagne master's layer.

    ``y = (x - mean) * gamma * inv_std + beta``: in training with the
    mini-batch's mean and ``inv_std = 1 / sqrt(var + epsilon)`` (biased
    variance), at test time with stored averages of them.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer feeding into this one, or the input shape.
    axes : 'auto', int or tuple of int
        Axes to normalize over; ``'auto'`` is all but the second (the batch
        axis for dense layers, plus the spatial axes for convolutions).
    epsilon : float or scalar tensor
        Added to the variance before the square root; finite and > 0.
    alpha : float, scalar tensor or None
        Weight of each batch in the moving averages, in ``[0, 1]`` (a
        symbolic value is checked when the function runs, in every mode).
        ``None`` keeps a cumulative average of all batches seen (PyTorch's
        ``momentum=None``): the weight of the ``n``-th batch is ``1 / n``,
        counted by an extra parameter ``num_batches_tracked`` (an int64
        scalar, tag ``batch_norm_stat``, updated with the statistics).
    beta : initializer, array, expression or None
        Shift, shaped like the input without ``axes``; ``None`` fixes it to 0.
        Trainable, not regularizable.
    gamma : initializer, array, expression or None
        Scale, same shape; ``None`` fixes it to 1.  Trainable, regularizable.
    mean : initializer, array, expression
        Stored mean (not trainable, tag ``batch_norm_stat``).
    inv_std : initializer, array, expression
        Stored ``1 / sqrt(var + epsilon)`` (with ``stat_storage='inv_std'``).
    var : initializer, array, expression
        Stored unbiased variance (with ``stat_storage='var'``); default 1.
    stat_storage : 'inv_std' or 'var'
        What the layer stores besides the mean.  ``'inv_std'`` (default) is
        Lasagne's: parameters ``beta, gamma, mean, inv_std`` and the moving
        average ``inv_std <- (1 - alpha) * inv_std + alpha * batch_inv_std``
        (what legacy checkpoints hold).  ``'var'`` stores ``var`` instead and
        averages the unbiased batch variance (``m / (m - 1)`` times the biased
        one, ``m`` values per statistic), as Theano's
        ``batch_normalization_train`` does; test outputs use
        ``1 / sqrt(var + epsilon)``.
    renorm : bool
        Batch renormalization (Ioffe, 2017): in training the normalized
        values become ``x_hat * r + d`` before ``gamma`` and ``beta``, with
        ``r = clip(batch_std / running_std, 1 / r_max, r_max)`` and
        ``d = clip((batch_mean - running_mean) / running_std, -d_max,
        d_max)`` (no gradient flows through ``r`` and ``d``).  The running
        statistics are the layer's own averages (``std = 1 / inv_std``, or
        ``sqrt(var + epsilon)``), as in the paper's algorithm; Keras keeps a
        second pair averaged with ``renorm_momentum``.  Test-time outputs
        are unchanged.
    r_max, d_max : float or scalar tensor
        The clipping bounds (``r_max >= 1``, ``d_max >= 0``, ``inf`` for no
        clipping; defaults 3 and 5, the paper's final values).  A shared
        variable makes a schedule: the paper starts at ``r_max=1, d_max=0``
        (plain batch norm) and relaxes them.  Only with ``renorm=True``.
        A symbolic value is range-checked when the function runs.
    virtual_batch_size : int or None
        Ghost batch normalization: in training, statistics are computed per
        virtual batch of this many examples (``axes`` must contain the batch
        axis 0, whose size the virtual batch size must divide).  As in
        TensorFlow/Keras 2, the batch is reshaped to ``(virtual_batch_size,
        -1, ...)``, so example ``i`` belongs to virtual batch ``i % (batch
        size / virtual_batch_size)``, and the running averages are updated
        once per batch with the mean over virtual batches of their means and
        variances (``inv_std`` from that variance; ``var`` averages unbiased
        per-virtual-batch variances).  With ``renorm=True`` too, ``r`` and
        ``d`` are per virtual batch (TensorFlow takes them from the averaged
        statistics), so that ``x_hat * r + d`` is exactly the input
        normalized by the running averages when nothing is clipped.  A batch
        size it does not divide is an error when the function runs.
    **kwargs
        ``name`` and anything else :class:`Layer` takes.

    Notes
    -----
    :func:`lasagne_bn.layers.get_output` keywords control the layer:
    ``deterministic=True`` normalizes with the stored averages and does not
    update them; ``batch_norm_use_averages`` and
    ``batch_norm_update_averages`` (True / False) override each choice.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> bn = BatchNormLayer(InputLayer((None, 16, 8, 8)), name='bn')
    >>> bn.axes, [p.name for p in bn.get_params()]
    ((0, 2, 3), ['bn.beta', 'bn.gamma', 'bn.mean', 'bn.inv_std'])
    >>> bn.mean.get_value().shape
    (16,)
    >>> BatchNormLayer(InputLayer((None, 16)), stat_storage='var').get_params()[-1].name
    'var'
    >>> bn = BatchNormLayer(InputLayer((None, 16)), alpha=None, renorm=True, virtual_batch_size=8)
    >>> [p.name for p in bn.get_params()], bn.r_max, bn.d_max
    (['beta', 'gamma', 'mean', 'inv_std', 'num_batches_tracked'], 3.0, 5.0)
    """

    # Class-level defaults for subclasses whose __init__ skips ours.
    stat_storage = "inv_std"
    _built_axes = None
    num_batches_tracked = None
    renorm = False
    r_max = None
    d_max = None
    virtual_batch_size = None

    def __init__(
        self,
        incoming: Incoming,
        axes: str | int | Sequence[int] = "auto",
        epsilon: float = 1e-4,
        alpha: float | None = 0.1,
        beta: ParamSpec = init.Constant(0),
        gamma: ParamSpec = init.Constant(1),
        mean: ParamSpec = init.Constant(0),
        inv_std: ParamSpec = _DEFAULT_INV_STD,
        *,
        var: ParamSpec = _DEFAULT_VAR,
        stat_storage: str = "inv_std",
        renorm: bool = False,
        r_max: float | None = None,
        d_max: float | None = None,
        virtual_batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        if stat_storage not in STAT_STORAGES:
            raise ValueError(
                f"stat_storage={stat_storage!r} is not known: expected 'inv_std' or 'var'"
            )
        if stat_storage == "inv_std" and var is not _DEFAULT_VAR:
            raise ValueError("var is only used with stat_storage='var'; pass inv_std instead")
        if stat_storage == "var" and inv_std is not _DEFAULT_INV_STD:
            raise ValueError("inv_std is only used with stat_storage='inv_std'; pass var instead")
        self.stat_storage = stat_storage
        self.axes = _normalize_axes(axes, len(self.input_shape))
        self.epsilon = check_scalar(epsilon, EPSILON)
        self.alpha = None if alpha is None else check_scalar(alpha, ALPHA)
        self._init_renorm(renorm, r_max, d_max)
        self._init_virtual_batches(virtual_batch_size)
        shape = tuple(s for a, s in enumerate(self.input_shape) if a not in self.axes)
        if any(s is None for s in shape):
            raise ValueError(
                "BatchNormLayer needs specified input sizes for all axes not normalized over; "
                f"got input_shape={self.input_shape!r} with axes={self.axes!r}"
            )
        self.param_shape = shape
        # What the parameters were built for; a subclass that changes
        # ``self.axes`` or the parameters afterwards gets Lasagne's formulas.
        self._built_axes = self.axes
        _add_shift_and_scale(self, beta, gamma, shape)
        stat_tags = {"trainable": False, "regularizable": False, "batch_norm_stat": True}
        self.mean = self.add_param(mean, shape, "mean", **stat_tags)
        if stat_storage == "inv_std":
            self.inv_std = self.add_param(inv_std, shape, "inv_std", **stat_tags)
        else:
            self.var = self.add_param(var, shape, "var", **stat_tags)
        if self.alpha is None:
            self.num_batches_tracked = self.add_param(
                np.zeros((), dtype="int64"), (), "num_batches_tracked", **stat_tags
            )

    def _init_renorm(self, renorm, r_max, d_max) -> None:
        if not isinstance(renorm, bool | np.bool_):
            raise TypeError(f"renorm={renorm!r} must be True or False")
        if not renorm:
            for name, value in (("r_max", r_max), ("d_max", d_max)):
                if value is not None:
                    raise ValueError(f"{name}={value!r} is only used with renorm=True")
            return
        self.renorm = True
        self.r_max = check_scalar(3.0 if r_max is None else r_max, R_MAX)
        self.d_max = check_scalar(5.0 if d_max is None else d_max, D_MAX)

    def _init_virtual_batches(self, size) -> None:
        if size is None:
            return
        if isinstance(size, bool) or not isinstance(size, utils.int_types):
            raise TypeError(f"virtual_batch_size={size!r} must be a positive int or None")
        if size < 1:
            raise ValueError(f"virtual_batch_size={size!r} must be a positive int")
        if 0 not in self.axes:
            raise ValueError(
                f"virtual_batch_size={size!r} needs the batch axis 0 among the normalized "
                f"axes; got axes={self.axes!r}"
            )
        batch = self.input_shape[0]
        if batch is not None and batch % size:
            raise ValueError(
                f"virtual_batch_size={size!r} does not divide the batch size {batch} of "
                f"input_shape={self.input_shape!r}"
            )
        self.virtual_batch_size = int(size)

    def _complete_state(self) -> None:
        # Lasagne's layer (a plain pickle.load of a Lasagne network) stored inv_std
        self.__dict__.setdefault("stat_storage", "inv_std")
        if "param_shape" not in self.__dict__:
            shape = (s for a, s in enumerate(self.input_shape) if a not in self.axes)
            self.param_shape = tuple(shape)

    # ---------------------------------------------------------------- helpers

    @property
    def _stat2(self):
        """The stored statistic besides the mean: ``inv_std`` or ``var``."""
        return self.inv_std if self.stat_storage == "inv_std" else self.var

    def set_stat_storage(self, storage: str, *, epsilon: float | None = None, value=None) -> bool:
        """Store ``storage`` (``'inv_std'`` or ``'var'``) besides the mean from now on.

        The stored statistic is converted (``var = 1 / inv_std**2 -
        epsilon``, ``inv_std = 1 / sqrt(var + epsilon)``) into a *new* shared
        variable that takes the old one's place in ``params`` (same position
        and tags, so ``get_all_params`` keeps its order), is named like
        ``add_param`` names it, and becomes the attribute ``inv_std`` or
        ``var`` (the other attribute goes).  Functions compiled before keep
        the old variable: compile again.  A layer that already stores
        ``storage`` is left as it is.

        Parameters
        ----------
        storage : 'inv_std' or 'var'
        epsilon : float, optional
            Convert with this epsilon instead of the layer's own.
        value : array, optional
            The statistic already expressed in ``storage`` (for a caller that
            converted several layers before changing any): used as it is.

        Returns
        -------
        bool
            Whether the layer changed.

        Raises
        ------
        ValueError
            For an unknown ``storage``, a statistic that is an expression
            rather than a shared variable, or values that cannot be converted
            (the layer is then unchanged).

        Examples
        --------
        >>> from lasagne_bn.layers import InputLayer
        >>> bn = BatchNormLayer(InputLayer((None, 2)), name='bn')
        >>> bn.set_stat_storage('var'), bn.stat_storage, bn.var.name
        (True, 'var', 'bn.var')
        >>> bn.var.get_value().round(6).tolist()
        [0.9999, 0.9999]
        """
        if storage not in STAT_STORAGES:
            raise ValueError(
                f"storage={storage!r} is not a statistic storage: expected 'inv_std' or 'var'"
            )
        if storage == self.stat_storage:
            return False
        old = self._stat2
        if value is None:
            value = converted_statistic(self, storage, epsilon)
        elif not isinstance(old, SharedVariable) or np.shape(value) != np.shape(
            old.get_value(borrow=True)
        ):
            raise ValueError(
                f"layer {self.name!r}: value of shape {np.shape(value)} cannot replace its "
                f"{self.stat_storage} ({old}); expected a shared variable's values of its shape"
            )
        name = storage if self.name is None else f"{self.name}.{storage}"
        new = utils.create_param(np.asarray(value), np.shape(value), name)
        self.params = type(self.params)(
            (new if param is old else param, tags) for param, tags in self.params.items()
        )
        delattr(self, self.stat_storage)
        setattr(self, storage, new)
        self.stat_storage = storage
        return True

    def _fits_ops(self, ndim: int) -> bool:
        """Whether the layer is as ``__init__`` built it, so the fused ops apply.

        Legacy subclasses set ``axes`` or their own parameters after
        construction (a layer norm written as a BatchNormLayer); those, and
        an empty ``axes``, take :meth:`_lasagne_output` instead.
        """
        if not self._built_axes or self.axes != self._built_axes:
            return False
        if len(self.param_shape) != ndim - len(self.axes):
            return False
        for var in (self.gamma, self.beta, self.mean, self._stat2):
            if var is None:
                continue
            if not isinstance(var, Variable) or var.ndim != len(self.param_shape):
                return False
            if isinstance(var, SharedVariable):
                shape = np.shape(var.get_value(borrow=True))
            else:
                shape = var.type.shape
            if any(s is not None and s != p for s, p in zip(shape, self.param_shape, strict=True)):
                return False
        return True

    def _scale_shift(self, dtype: str):
        """``gamma`` and ``beta`` in reduced layout; constants where they are None."""
        gamma = self.gamma if self.gamma is not None else pt.ones(self.param_shape, dtype=dtype)
        beta = self.beta if self.beta is not None else pt.zeros(self.param_shape, dtype=dtype)
        return gamma, beta

    def _with_averages(self, input, gamma, beta, mean, stat2):
        """Normalize ``input`` with given (stored) statistics."""
        if self.stat_storage == "var":
            return batch_normalization_test(
                input, gamma, beta, mean, stat2, axes=self.axes, epsilon=self.epsilon
            )
        # Lasagne: (x - mean) * (gamma * inv_std) + beta.  The op computes
        # (x - mean) * (g / std) + b; with g = gamma * inv_std and std = 1
        # that is the same arithmetic, exactly.
        pattern = broadcast_pattern(self.axes, input.ndim)
        scale = stat2 if self.gamma is None else gamma * stat2
        one = pt.constant(1, dtype=scale.dtype)
        zero = pt.constant(0, dtype=scale.dtype)
        shift = zero if self.beta is None else beta.dimshuffle(pattern)
        return batch_normalization(
            input, scale.dimshuffle(pattern), shift, mean.dimshuffle(pattern), one
        )

    def _factor(self, count, dtype: str = "float64"):
        """The weight of this batch: ``alpha``, or ``1 / (n + 1)`` after ``n`` batches."""
        if self.alpha is None:
            one = pt.constant(1, dtype=dtype)
            return one / (pt.cast(count, dtype) + one)
        return checked(self.alpha, ALPHA)

    def _average_weights(self, dtype: str, count=None):
        """``(1 - alpha, alpha)`` as scalars of ``dtype`` (``count``: see :meth:`_factor`)."""
        if self.alpha is None:
            take = self._factor(count, dtype)
            return pt.constant(1, dtype=dtype) - take, take
        if isinstance(self.alpha, Variable):
            alpha = pt.cast(checked(self.alpha, ALPHA), dtype)
            return pt.constant(1, dtype=dtype) - alpha, alpha
        return pt.constant(1 - self.alpha, dtype=dtype), pt.constant(self.alpha, dtype=dtype)

    # ----------------------------------------------------------------- output

    def get_output_for(
        self,
        input,
        deterministic=False,
        batch_norm_use_averages=None,
        batch_norm_update_averages=None,
        **kwargs,
    ):
        """Normalize ``input``; which statistics, and whether to update the averages.

        Parameters
        ----------
        input : tensor
        deterministic : bool
            Test time: use the stored averages and do not update them.
        batch_norm_use_averages : bool or None
            Normalize with the stored averages (True) or the batch's
            statistics (False); None means ``deterministic``, or True for a
            frozen layer (:func:`~lasagne_bn.layers.freeze_batch_norm`).
        batch_norm_update_averages : bool or None
            Update the stored averages with this batch's statistics; None
            means ``not deterministic``, or False for a frozen layer.  Inside
            ``get_output(..., return_updates=True)`` the updates are returned,
            otherwise they are default updates of aliased clones.
        """
        frozen = getattr(self, "frozen", False)  # see lasagne_bn.layers.freeze_batch_norm
        use_averages = (
            (deterministic or frozen)
            if batch_norm_use_averages is None
            else batch_norm_use_averages
        )
        update_averages = (
            (not deterministic and not frozen)
            if batch_norm_update_averages is None
            else batch_norm_update_averages
        )
        if not self._fits_ops(input.ndim):
            return self._lasagne_output(input, use_averages, update_averages)
        gamma, beta = self._scale_shift(input.dtype)
        special = self.renorm or self.virtual_batch_size is not None
        if not update_averages:
            if use_averages:
                return self._with_averages(input, gamma, beta, self.mean, self._stat2)
            if special:
                return self._special_train(
                    input, gamma, beta, self.epsilon, self.mean, self._stat2
                )[0]
            out, _, _ = batch_normalization_train(
                input, gamma, beta, axes=self.axes, epsilon=self.epsilon
            )
            return out

        updates = active_updates()
        count = self.num_batches_tracked
        if updates is None:
            # Lasagne's way: default updates on memory-aliased clones.  The
            # graph reads the statistics only through the clones, never
            # through the originals too: two variables on one buffer, one of
            # them updated in place, gave wrong outputs (Numba, CVM).
            run_mean = _aliased_clone(self.mean, self.param_shape, self.name)
            run_stat2 = _aliased_clone(self._stat2, self.param_shape, self.name)
            run_count = None if count is None else _aliased_clone(count, (), self.name)
        else:
            run_mean, run_stat2, run_count = self.mean, self._stat2, count
        # The training output must depend on the clones for PyTensor to find
        # their default updates (the counter is found through the others'
        # update expressions, which read it).
        needs_deps = updates is None and not use_averages

        epsilon = self.epsilon
        if needs_deps and (special or self.stat_storage == "inv_std"):
            # The dependency goes through beta (one small vector), never
            # through epsilon: a constant epsilon reaches the Op as a
            # constant, checked when the graph is built, not on every call.
            beta = _depends_on(beta, run_mean, run_stat2)
        if special:
            _out, batch_mean, batch_stat2 = self._special_train(
                input, gamma, beta, epsilon, run_mean, run_stat2
            )
            keep, take = self._average_weights(run_mean.dtype, run_count)
            new_mean = running_average_update(run_mean, batch_mean, take, keep)
            new_stat2 = running_average_update(run_stat2, batch_stat2, take, keep)
        elif self.stat_storage == "var":
            _out, _, _, new_mean, new_stat2 = batch_normalization_train(
                input,
                gamma,
                beta,
                axes=self.axes,
                epsilon=epsilon,
                running_average_factor=self._factor(run_count),
                running_mean=run_mean,
                running_var=run_stat2,
            )
        else:
            _out, batch_mean, batch_inv_std = batch_normalization_train(
                input, gamma, beta, axes=self.axes, epsilon=epsilon
            )
            # Lasagne's formulas, in the statistics' dtype (as Theano with
            # floatX=float32 computed them).
            keep, take = self._average_weights(run_mean.dtype, run_count)
            new_mean = running_average_update(run_mean, batch_mean, take, keep)
            new_stat2 = running_average_update(run_stat2, batch_inv_std, take, keep)

        new_count = None if run_count is None else run_count + 1
        if updates is None:
            utils.set_default_update(run_mean, new_mean)
            utils.set_default_update(run_stat2, new_stat2)
            if run_count is not None:
                utils.set_default_update(run_count, new_count)
        else:
            add_update(updates, self.mean, new_mean)
            add_update(updates, self._stat2, new_stat2)
            if run_count is not None:
                add_update(updates, count, new_count)

        if use_averages:
            return self._with_averages(input, gamma, beta, run_mean, run_stat2)
        return _out

    def _special_train(self, input, gamma, beta, epsilon, run_mean, run_stat2):
        """Training output with virtual batches and/or renormalization.

        Returns ``(output, batch_mean, batch_stat2)``: the statistics to
        average (parameter layout), ``batch_stat2`` in the layer's storage.
        """
        size = self.virtual_batch_size
        # Sizes known when the layer was built stay Python ints (JAX needs
        # static shapes); the others are symbolic.
        sizes = [s if s is not None else input.shape[i] for i, s in enumerate(self.input_shape)]
        if size is None:
            x, axes, x_sizes = input, self.axes, sizes
        else:
            # TensorFlow's grouping: (size, batch // size, ...), the second
            # axis indexing the virtual batches.
            batch = self.input_shape[0]
            groups = -1 if batch is None else batch // size
            x = input.reshape((size, groups, *sizes[1:]))
            axes = (0,) + tuple(a + 1 for a in self.axes if a != 0)
            x_sizes = [size, x.shape[1] if batch is None else groups, *sizes[1:]]
        # With a unit scale and zero shift the op gives x_hat and the batch
        # statistics; gamma and beta (and r, d) are applied after.
        unit_shape = [1 if a in axes else x_sizes[a] for a in range(x.ndim)]
        ones = pt.ones(unit_shape, dtype=input.dtype)
        zeros = pt.zeros(unit_shape, dtype=input.dtype)
        x_hat, mean, inv_std = batch_normalization_train(
            x, ones, zeros, axes=axes, epsilon=epsilon
        )
        dtype = mean.dtype
        eps = pt.cast(epsilon, dtype)
        # parameters (param_shape) against x's layout
        kept = iter(range(len(self.param_shape)))
        pattern = [
            "x" if a in axes or (size is not None and a == 1) else next(kept)
            for a in range(x.ndim)
        ]
        scale = pt.cast(gamma, dtype).dimshuffle(pattern)
        shift = pt.cast(beta, dtype).dimshuffle(pattern)
        if self.renorm:
            if self.stat_storage == "inv_std":
                run_inv_std = pt.cast(run_stat2, dtype)
            else:
                run_inv_std = pt.reciprocal(pt.sqrt(pt.cast(run_stat2, dtype) + eps))
            run_inv_std = run_inv_std.dimshuffle(pattern)
            r_max = pt.cast(checked(self.r_max, R_MAX), dtype)
            d_max = pt.cast(checked(self.d_max, D_MAX), dtype)
            r = pt.clip(run_inv_std / inv_std, pt.reciprocal(r_max), r_max)
            d = pt.clip((mean - pt.cast(run_mean, dtype).dimshuffle(pattern)) * run_inv_std,
                        -d_max, d_max)  # fmt: skip
            r, d = zero_grad(r), zero_grad(d)
            shift = shift + scale * d
            scale = scale * r
        out = pt.cast(x_hat * scale + shift, input.dtype)
        stats_kept = [a for a in range(x.ndim) if a not in axes]
        mean = mean.dimshuffle(stats_kept)
        inv_std = inv_std.dimshuffle(stats_kept)
        m = symbolic_m(x, axes, "float64")
        # the op returns inv_std = 1 / sqrt(var + eps); var comes back from it
        if size is None:
            batch_mean = mean
            if self.stat_storage == "inv_std":
                batch_stat2 = inv_std
            else:
                var = pt.reciprocal(pt.sqr(inv_std)) - eps
                batch_stat2 = var * pt.cast(m / pt.maximum(m - 1.0, 0.0), dtype)
        else:
            out = out.reshape((-1, *sizes[1:]))
            # TensorFlow's averages: the mean over virtual batches of their
            # means and (biased) variances
            groups = pt.cast(x.shape[1], dtype)
            batch_mean = mean.sum(axis=0) / groups
            var = (pt.reciprocal(pt.sqr(inv_std)) - eps).sum(axis=0) / groups
            if self.stat_storage == "inv_std":
                batch_stat2 = pt.reciprocal(pt.sqrt(var + eps))
            else:
                batch_stat2 = var * pt.cast(m / pt.maximum(m - 1.0, 0.0), dtype)
        return out, batch_mean, batch_stat2


def _lasagne_output(self, input, use_averages: bool, update_averages: bool):
    """Lasagne's own formulas, from whatever ``axes`` and parameters the layer has now.

    Used for what the fused ops do not describe: an empty ``axes`` (the
    statistics are the input itself and variance 0) and subclasses that
    change ``axes`` or the parameters after construction.  ``gamma`` /
    ``beta`` of None are the scalars 1 and 0, as in Lasagne.
    """
    if getattr(self, "renorm", False) or getattr(self, "virtual_batch_size", None) is not None:
        raise ValueError(
            f"layer {self.name!r}: renorm and virtual_batch_size need the axes and parameter "
            f"shapes the layer was built with; got axes={self.axes!r}"
        )
    axes = self.axes
    if isinstance(axes, utils.int_types):
        axes = (axes,)
    axes = tuple(axes)
    if axes:
        input_mean = input.mean(axes)
        input_var = input.var(axes)
    else:
        input_mean = input
        input_var = pt.zeros_like(input)
    epsilon = self.epsilon
    input_inv_std = pt.reciprocal(pt.sqrt(input_var + epsilon))
    var_storage = self.stat_storage == "var"
    if use_averages:
        mean, stat2 = self.mean, self._stat2
    else:
        mean, stat2 = input_mean, input_var if var_storage else input_inv_std
    if update_averages:
        updates = active_updates()
        count = getattr(self, "num_batches_tracked", None)
        if updates is None:
            run_mean = _aliased_clone(self.mean, _value_shape(self.mean), self.name)
            run_stat2 = _aliased_clone(self._stat2, _value_shape(self._stat2), self.name)
            run_count = None if count is None else _aliased_clone(count, (), self.name)
        else:
            run_mean, run_stat2, run_count = self.mean, self._stat2, count
        keep, take = self._average_weights(run_mean.dtype, run_count)
        if var_storage:
            m = 1
            for a in axes:
                m = m * input.shape[a]
            m = pt.cast(m, "float64")
            batch_stat2 = input_var * (m / pt.maximum(m - 1.0, 0.0))
        else:
            batch_stat2 = input_inv_std
        new_mean = running_average_update(run_mean, input_mean, take, keep)
        new_stat2 = running_average_update(run_stat2, batch_stat2, take, keep)
        if updates is None:
            utils.set_default_update(run_mean, _as_type(new_mean, run_mean))
            utils.set_default_update(run_stat2, _as_type(new_stat2, run_stat2))
            if run_count is not None:
                utils.set_default_update(run_count, run_count + 1)
            mean = _depends_on(mean, run_mean, run_stat2)
        else:
            add_update(updates, self.mean, _as_type(new_mean, self.mean))
            add_update(updates, self._stat2, _as_type(new_stat2, self._stat2))
            if run_count is not None:
                add_update(updates, count, count + 1)
    param_axes = iter(range(input.ndim - len(axes)))
    pattern = ["x" if a in axes else next(param_axes) for a in range(input.ndim)]
    inv_std = pt.reciprocal(pt.sqrt(stat2 + epsilon)) if var_storage and use_averages else stat2
    beta = 0 if self.beta is None else self.beta.dimshuffle(pattern)
    gamma = 1 if self.gamma is None else self.gamma.dimshuffle(pattern)
    mean = pt.as_tensor_variable(mean).dimshuffle(pattern)
    inv_std = pt.as_tensor_variable(inv_std).dimshuffle(pattern)
    return pt.cast((input - mean) * (gamma * inv_std) + beta, input.dtype)


BatchNormLayer._lasagne_output = _lasagne_output


def _value_shape(var) -> tuple:
    return np.shape(var.get_value(borrow=True)) if isinstance(var, SharedVariable) else ()


def _as_type(expr, var):
    """``expr`` with exactly ``var``'s type, as an update of ``var`` must have."""
    expr = pt.cast(expr, var.dtype)
    if expr.type.shape != var.type.shape:
        expr = pt.specify_shape(expr, var.type.shape)
    return var.type.filter_variable(expr, allow_convert=True)


def batch_norm(layer: Layer, **kwargs: Any) -> Layer:
    """Put batch normalization between a layer and its nonlinearity.

    Modifies ``layer`` (irreversibly, as Lasagne does): its nonlinearity
    becomes the identity and its bias ``b`` is removed (from ``layer.params``
    too; it would be redundant).  On top come a :class:`BatchNormLayer`
    (named ``<name>_bn``) and, if the layer had a nonlinearity, a
    :class:`NonlinearityLayer` with it (``<name>_bn_nonlin``).  Works for any
    layer with ``nonlinearity`` and ``b`` attributes (dense, convolution...).

    Parameters
    ----------
    layer : Layer
        The layer to normalize.
    **kwargs
        Passed to :class:`BatchNormLayer`; ``name`` names it (and the
        nonlinearity layer ``name + '_nonlin'``).

    Returns
    -------
    NonlinearityLayer or BatchNormLayer
        The top layer.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, get_all_params
    >>> l = batch_norm(DenseLayer(InputLayer((None, 784)), 500))
    >>> [p.name for p in get_all_params(l)]
    ['W', 'beta', 'gamma', 'mean', 'inv_std']
    """
    from lasagne_bn.layers.special import NonlinearityLayer

    bn_name = _derived_name(layer, kwargs, "_bn")
    normalized = BatchNormLayer(layer, name=bn_name, **kwargs)
    nonlinearity = _take_bias_and_nonlinearity(layer)
    if nonlinearity is not None:
        nonlin_name = bn_name and bn_name + "_nonlin"
        normalized = NonlinearityLayer(normalized, nonlinearity, name=nonlin_name)
    return normalized


def _derived_name(layer, kwargs: dict, suffix: str):
    """``kwargs['name']`` (popped) if given, else ``layer.name + suffix`` (None if unnamed)."""
    return kwargs.pop("name", None) or (getattr(layer, "name", None) and layer.name + suffix)


def _take_bias_and_nonlinearity(layer):
    """Remove ``layer``'s bias and nonlinearity (identity instead); return the nonlinearity.

    The wrappers call this only after every new layer that can reject an
    argument is built, so a bad argument leaves ``layer`` as it was.
    """
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is not None:
        layer.nonlinearity = nonlinearities.identity
    if getattr(layer, "b", None) is not None:
        del layer.params[layer.b]
        layer.b = None
    return nonlinearity


class LocalResponseNormalization2DLayer(Layer):
    """Cross-channel local response normalization of ``(batch, channels, rows, cols)`` input.

    ``y_i = x_i / (k + alpha * sum_j x_j**2) ** beta``, the sum running over
    the ``n`` channels centred on ``i`` (zero beyond the edges).

    Parameters
    ----------
    incoming : Layer or tuple
    alpha, k, beta : float
        See the formula.
    n : int
        Number of adjacent channels; must be odd.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = LocalResponseNormalization2DLayer(InputLayer((None, 8, 4, 4)), n=3)
    >>> l.output_shape, l.get_params()
    ((None, 8, 4, 4), [])
    """

    def __init__(
        self,
        incoming: Incoming,
        alpha: float = 1e-4,
        k: float = 2,
        beta: float = 0.75,
        n: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) != 4:
            raise ValueError(
                f"LocalResponseNormalization2DLayer needs 4-d (b, c, 0, 1) input; got "
                f"input_shape={self.input_shape!r}"
            )
        self.alpha = alpha
        self.k = k
        self.beta = beta
        self.n = n
        if n % 2 == 0:
            raise NotImplementedError("Only works with odd n")

    def get_output_shape_for(self, input_shape):
        return input_shape

    def get_output_for(self, input, **kwargs):
        half_n = self.n // 2
        # Sizes known when the layer was built are used as Python ints: JAX
        # cannot build arrays whose shape is computed from a traced size.
        sizes = [s if s is not None else input.shape[i] for i, s in enumerate(self.input_shape)]
        batch, channels, rows, cols = sizes
        sqr = pt.sqr(input)
        padded = pt.zeros((batch, channels + 2 * half_n, rows, cols), dtype=input.dtype)
        padded = pt.set_subtensor(padded[:, half_n : half_n + channels], sqr)
        scale = pt.constant(self.k, dtype=input.dtype)
        alpha = pt.constant(self.alpha, dtype=input.dtype)
        for i in range(self.n):
            scale = scale + alpha * padded[:, i : i + channels]
        return input / scale ** pt.constant(self.beta, dtype=input.dtype)


class StandardizationLayer(Layer):
    """Standardize to zero mean and unit variance over ``axes``, per example.

    Unlike batch normalization there are no parameters and no running
    averages: train and test outputs are the same.

    Parameters
    ----------
    incoming : Layer or tuple
    axes : 'auto', 'spatial', 'features', int or tuple of int
        ``'auto'``: axis 1 for 2-d input, else all axes from 2 on;
        ``'spatial'``: all axes from 2 on; ``'features'``: all but axis 0.
    epsilon : float
        Added to the (biased) variance.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> StandardizationLayer(InputLayer((None, 3, 4, 4))).axes
    (2, 3)
    >>> l = StandardizationLayer(InputLayer((None, 3, 4, 4)), axes='features')
    >>> l.axes, l.get_params()
    ((1, 2, 3), [])
    """

    def __init__(
        self,
        incoming: Incoming,
        axes: str | int | Sequence[int] = "auto",
        epsilon: float = 1e-4,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if isinstance(axes, str) and axes in ("auto", "spatial", "features"):
            if axes == "auto":
                axes = (1,) if ndim == 2 else tuple(range(2, ndim))
            elif axes == "spatial":
                axes = tuple(range(2, ndim))
            else:
                axes = tuple(range(1, ndim))
        self.axes = _normalize_axes(axes, ndim)
        self.epsilon = check_scalar(epsilon, EPSILON)

    def get_output_for(self, input, **kwargs):
        if not self.axes:
            # Over no axis the mean is the input and the variance 0 (NumPy's rule).
            eps = pt.cast(pt.as_tensor_variable(checked(self.epsilon, EPSILON)), input.dtype)
            return (input - input) / pt.sqrt(eps)
        # The statistics core and normalize step batch norm shares; float16
        # is normalized in the statistics' float32.
        # (no Op checks epsilon here: a symbolic one is checked when run)
        return normalize(input, Moments(self.axes)(input), checked(self.epsilon, EPSILON))


class GroupNormLayer(Layer):
    """Group normalization (Wu & He, 2018), as Keras 3's ``GroupNormalization``.

    The channels (axis ``axis``) are split into ``groups`` groups of
    consecutive channels; each example is standardized per group, over the
    group's channels and all other non-batch axes, then scaled and shifted
    per channel: ``y = (x - mean) / sqrt(var + epsilon) * gamma + beta``
    (biased variance).  Train and test outputs are the same; there are no
    running averages.  ``groups=1`` is a layer norm with per-channel
    parameters; ``groups=-1`` (one channel per group) is instance norm.

    The statistics and the normalize step are :class:`lasagne_bn.ops.Moments`
    and :func:`lasagne_bn.ops.normalize`, as for :class:`StandardizationLayer`
    (layer and instance norm) and the batch-norm Op's kernels.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer feeding into this one, or the input shape; the size of
        ``axis`` must be known.
    groups : int
        Number of groups, dividing the number of channels; ``-1`` means one
        group per channel.  Keras's default, 32.
    axis : int
        The channel axis: 1 for Lasagne's ``(batch, channels, ...)`` layout
        (Keras's default is -1, channels last).  Not the batch axis 0.
    epsilon : float
        Added to the variance before the square root; > 0.  Keras's default.
    beta : initializer, array, expression or None
        Per-channel shift; ``None`` leaves it out (Keras's ``center=False``).
        Trainable, not regularizable.
    gamma : initializer, array, expression or None
        Per-channel scale; ``None`` leaves it out (``scale=False``).
        Trainable, regularizable (as :class:`BatchNormLayer`'s).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> gn = GroupNormLayer(InputLayer((None, 8, 5, 5)), groups=4, name='gn')
    >>> [p.name for p in gn.get_params()], gn.groups
    (['gn.beta', 'gn.gamma'], 4)
    >>> GroupNormLayer(InputLayer((None, 8, 5, 5)), groups=-1).groups
    8
    """

    def __init__(
        self,
        incoming: Incoming,
        groups: int = 32,
        axis: int = 1,
        epsilon: float = 1e-3,
        beta: ParamSpec = init.Constant(0),
        gamma: ParamSpec = init.Constant(1),
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if isinstance(axis, bool) or not isinstance(axis, utils.int_types):
            raise TypeError(f"axis={axis!r} must be an int")
        (self.axis,) = _normalize_axes(axis, ndim, "axis")
        if self.axis == 0:
            raise ValueError(f"axis={axis!r} is the batch axis; expected a channel axis")
        channels = self.input_shape[self.axis]
        if channels is None:
            raise ValueError(
                f"GroupNormLayer needs the size of axis {self.axis} (the channels); got "
                f"input_shape={self.input_shape!r}"
            )
        if isinstance(groups, bool) or not isinstance(groups, utils.int_types):
            raise TypeError(f"groups={groups!r} must be an int (or -1 for one per channel)")
        if groups == -1:
            groups = channels
        if groups < 1 or groups > channels or channels % groups:
            raise ValueError(
                f"groups={groups!r} must be -1 or a positive divisor of the {channels} "
                f"channels on axis {self.axis}"
            )
        self.groups = int(groups)
        self.epsilon = check_scalar(epsilon, EPSILON)
        shape = (channels,)
        _add_shift_and_scale(self, beta, gamma, shape)

    def get_output_for(self, input, **kwargs):
        axis, groups = self.axis, self.groups
        # Known sizes stay Python ints (JAX needs static reshape shapes).
        sizes = [s if s is not None else input.shape[i] for i, s in enumerate(self.input_shape)]
        sizes[0] = -1
        grouped = [*sizes[:axis], groups, sizes[axis] // groups, *sizes[axis + 1 :]]
        x = input.reshape(grouped)
        axes = tuple(a for a in range(1, x.ndim) if a != axis)
        # Per-channel parameters in the grouped layout: (groups, channels / groups).
        pattern = ["x"] * x.ndim
        pattern[axis], pattern[axis + 1] = 0, 1

        def grouped_param(param):
            if param is None:
                return None
            return param.reshape((groups, sizes[axis] // groups)).dimshuffle(pattern)

        # The statistics core and normalize step batch norm shares; float16
        # is normalized in the statistics' float32 (as Keras does).
        out = normalize(
            x,
            Moments(axes)(x),
            checked(self.epsilon, EPSILON),
            grouped_param(self.gamma),
            grouped_param(self.beta),
        )
        return out.reshape(sizes)


def group_norm(layer: Layer, groups: int = 32, **kwargs: Any) -> Layer:
    """Group normalization between a layer and its nonlinearity.

    Like :func:`batch_norm`: removes ``layer``'s bias, moves its
    nonlinearity on top, and names the new layers ``<name>_gn`` and
    ``<name>_gn_nonlin``.  ``kwargs`` go to :class:`GroupNormLayer`.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, Conv2DLayer, get_all_params
    >>> l = group_norm(Conv2DLayer(InputLayer((None, 3, 8, 8)), 16, 3, name='c'), groups=4)
    >>> [p.name for p in get_all_params(l)], l.name
    (['c.W', 'c_gn.beta', 'c_gn.gamma'], 'c_gn_nonlin')
    """
    from lasagne_bn.layers.special import NonlinearityLayer

    gn_name = _derived_name(layer, kwargs, "_gn")
    top = GroupNormLayer(layer, groups, name=gn_name, **kwargs)
    nonlinearity = _take_bias_and_nonlinearity(layer)
    if nonlinearity is not None:
        top = NonlinearityLayer(top, nonlinearity, name=gn_name and gn_name + "_nonlin")
    return top


def instance_norm(
    layer: Layer, learn_scale: bool = True, learn_bias: bool = True, **kwargs: Any
) -> Layer:
    """Instance normalization: standardize each example's feature maps, then scale and shift.

    Like :func:`batch_norm`, removes ``layer``'s bias, moves its nonlinearity
    on top, and names the new layers ``<name>_in``, ``_in_scale``,
    ``_in_bias``, ``_in_nonlin``.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, Conv2DLayer, get_all_layers
    >>> net = instance_norm(Conv2DLayer(InputLayer((None, 3, 8, 8)), 4, 3, name='conv'))
    >>> [l.name for l in get_all_layers(net)][1:]
    ['conv', 'conv_in', 'conv_in_scale', 'conv_in_bias', 'conv_in_nonlin']
    """
    from lasagne_bn.layers.special import BiasLayer, NonlinearityLayer, ScaleLayer

    in_name = _derived_name(layer, kwargs, "_in")
    top = StandardizationLayer(layer, axes="spatial", name=in_name, **kwargs)
    if learn_scale:
        top = ScaleLayer(top, shared_axes="auto", name=in_name and in_name + "_scale")
    if learn_bias:
        top = BiasLayer(top, shared_axes="auto", name=in_name and in_name + "_bias")
    nonlinearity = _take_bias_and_nonlinearity(layer)
    if nonlinearity is not None:
        top = NonlinearityLayer(top, nonlinearity, name=in_name and in_name + "_nonlin")
    return top


def layer_norm(layer: Layer, **kwargs: Any) -> Layer:
    """Layer normalization: standardize each example over all its features, then scale and shift.

    Like :func:`batch_norm`, removes ``layer``'s bias, moves its nonlinearity
    on top, and names the new layers ``<name>_ln``, ``_ln_scale``,
    ``_ln_bias``, ``_ln_nonlin``.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, get_all_layers
    >>> net = layer_norm(DenseLayer(InputLayer((None, 5)), 4, name='fc'))
    >>> [l.name for l in get_all_layers(net)][1:]
    ['fc', 'fc_ln', 'fc_ln_scale', 'fc_ln_bias', 'fc_ln_nonlin']
    >>> net.output_shape
    (None, 4)
    """
    from lasagne_bn.layers.special import BiasLayer, NonlinearityLayer, ScaleLayer

    ln_name = _derived_name(layer, kwargs, "_ln")
    top = StandardizationLayer(layer, axes="features", name=ln_name, **kwargs)
    top = ScaleLayer(top, shared_axes="auto", name=ln_name and ln_name + "_scale")
    top = BiasLayer(top, shared_axes="auto", name=ln_name and ln_name + "_bias")
    nonlinearity = _take_bias_and_nonlinearity(layer)
    if nonlinearity is not None:
        top = NonlinearityLayer(top, nonlinearity, name=ln_name and ln_name + "_nonlin")
    return top
