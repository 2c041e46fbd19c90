"""Exact population statistics for batch-norm layers, after training.

Moving averages only approximate the statistics of the final network (each
batch was seen by different weights).  :func:`recompute_bn_stats` replaces
every :class:`~lasagne_bn.layers.BatchNormLayer`'s stored ``mean`` and
``inv_std`` / ``var`` by those of its inputs over a whole dataset, layer by
layer: each layer sees its inputs normalized by the already recomputed
layers below it (as PyTorch's ``swa_utils.update_bn`` recipe does, and what
Lasagne users approximated with ``alpha = 1 / (1 + n)``).

Per batch, each channel's count, mean and sum of squared deviations are
taken in float64 and merged with the pairwise update of Chan et al., so the
result is the full-dataset ``mean`` and (biased) ``var`` up to float64
rounding, however the data is batched.

>>> import numpy as np
>>> from lasagne_bn.layers import InputLayer, BatchNormLayer
>>> bn = BatchNormLayer(InputLayer((None, 2)), stat_storage='var')
>>> data = [np.array([[1., 10.], [3., 30.]]), np.array([[5., 50.]])]
>>> _ = recompute_bn_stats(bn, data, progress=False)
>>> bn.mean.get_value().tolist(), bn.var.get_value().round(4).tolist()
([3.0, 30.0], [2.6667, 266.6667])
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import TextIO

    from pytensor.compile.mode import Mode

    from lasagne_bn.layers.base import Layer

__all__ = ["recompute_bn_stats"]


class _Moments:
    """Streaming per-channel count, mean and sum of squared deviations (float64)."""

    def __init__(self):
        self.n = 0
        self.mean = None
        self.m2 = None

    def add(self, values: np.ndarray, axes: tuple[int, ...]) -> None:
        x = np.asarray(values, dtype=np.float64)
        n = int(np.prod([x.shape[a] for a in axes]))
        if n == 0:
            return
        mean = x.mean(axis=axes)
        m2 = np.square(x - np.expand_dims(mean, axes)).sum(axis=axes)
        if self.mean is None:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + np.square(delta) * (self.n * n / total)
        self.n = total

    @property
    def var(self) -> np.ndarray:
        return self.m2 / self.n


def _batches(batches, what: str) -> Callable[[], Iterable]:
    """A way to iterate ``batches`` once per layer."""
    if callable(batches):
        return batches
    if isinstance(batches, np.ndarray) or not isinstance(batches, Iterable):
        raise TypeError(
            f"{what}={type(batches).__name__}: expected a sequence of batches (a list, or an "
            "object iterable several times) or a function returning a fresh iterator"
        )
    if iter(batches) is batches:
        raise TypeError(
            f"{what} is a one-shot iterator, but every batch-norm layer needs one pass over "
            "the data: pass a list, or a function that returns a fresh iterator"
        )
    return lambda: batches


def recompute_bn_stats(
    network: Layer | Sequence[Layer],
    batches: Iterable | Callable[[], Iterator],
    *,
    mode: str | Mode | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
) -> list:
    """Set every batch-norm layer's statistics to its inputs' over ``batches``.

    Parameters
    ----------
    network : Layer or list of Layer
        The output layer(s).
    batches : sequence, or callable returning an iterator
        The data, batch by batch: each batch an input array, or a tuple of
        arrays (one per input layer, in ``get_all_layers`` order).  Iterated
        once per batch-norm layer.
    mode : PyTensor mode, optional
        Mode of the functions that compute each layer's inputs.
    progress : bool
        Print a progress line per layer (on ``stream``, default stderr).

    Returns
    -------
    list of BatchNormLayer
        The layers recomputed, bottom to top.

    Raises
    ------
    ValueError
        If ``batches`` holds no data.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 2)), 1, W=np.ones((2, 1)), name='fc'))
    >>> batches = [np.zeros((4, 2)), np.ones((4, 2))]
    >>> done = recompute_bn_stats(net, batches, mode='FAST_COMPILE', progress=False)
    >>> [layer.name for layer in done]
    ['fc_bn']
    >>> net.input_layer.mean.get_value().tolist()
    [1.0]
    """
    import pytensor

    from lasagne_bn.layers.bn_storage import var_to_inv_std
    from lasagne_bn.layers.helper import get_all_layers, get_output
    from lasagne_bn.layers.input import InputLayer
    from lasagne_bn.layers.normalization import BatchNormLayer

    again = _batches(batches, "batches")
    layers = get_all_layers(network)
    inputs = [layer.input_var for layer in layers if isinstance(layer, InputLayer)]
    bns = [layer for layer in layers if isinstance(layer, BatchNormLayer)]
    stream = sys.stderr if stream is None else stream
    for k, bn in enumerate(bns, 1):
        below = get_output(bn.input_layer, deterministic=True)
        compute = pytensor.function(inputs, below, mode=mode, on_unused_input="ignore")
        moments = _Moments()
        for count, batch in enumerate(again(), 1):
            args = batch if isinstance(batch, tuple | list) else (batch,)
            moments.add(compute(*args), bn.axes)
            if progress and count % 10 == 0:
                print(
                    f"\rrecomputing batch-norm statistics: layer {k}/{len(bns)} "
                    f"({bn.name}), batch {count}",
                    end="",
                    file=stream,
                    flush=True,
                )
        if moments.mean is None:
            raise ValueError("batches holds no data: nothing to compute the statistics from")
        bn.mean.set_value(moments.mean.astype(bn.mean.dtype))
        var = moments.var
        if bn.stat_storage == "var":
            bn.var.set_value(var.astype(bn.var.dtype))
        else:
            from lasagne_bn.layers.bn_storage import layer_epsilon

            bn.inv_std.set_value(var_to_inv_std(var, layer_epsilon(bn)).astype(bn.inv_std.dtype))
        if getattr(bn, "num_batches_tracked", None) is not None:
            # alpha=None: the statistics now stand for this many batches
            bn.num_batches_tracked.set_value(np.asarray(count, dtype="int64"))
        if progress:
            print(
                f"\rrecomputing batch-norm statistics: layer {k}/{len(bns)} ({bn.name}), "
                f"{moments.n:,} values per statistic",
                file=stream,
                flush=True,
            )
    return bns
