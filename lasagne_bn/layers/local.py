"""Locally connected layers: convolution-like, but every output position has its own filters.

:class:`LocallyConnected2DLayer` takes Lasagne's arguments and has its
parameter shapes; like Lasagne's it supports only unit stride and ``'same'``
padding (odd filter sizes).  The output is computed without any weight
sharing, as one batched matrix product over the output positions: the
``filter_rows * filter_cols`` shifted windows of the zero-padded input are
stacked along the channel axis, so each position multiplies a
``(batch, taps * channels)`` matrix by its own ``(taps * channels,
num_filters)`` one.  There are no reshapes of the batch axis, so a
variable batch size compiles under every backend (JAX included).

>>> from lasagne_bn.layers import InputLayer
>>> l = LocallyConnected2DLayer(InputLayer((None, 3, 6, 5)), num_filters=4, filter_size=3)
>>> l.output_shape, l.W.get_value().shape, l.b.get_value().shape
((None, 4, 6, 5), (4, 3, 3, 3, 6, 5), (4,))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.conv import Conv2DLayer
from lasagne_bn.ops.conv import conv2d

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming, Nonlinearity, ParamSpec

__all__ = ["LocallyConnected2DLayer"]


class LocallyConnected2DLayer(Conv2DLayer):
    """2-D locally connected layer: a 'same' convolution without weight sharing.

    Parameters
    ----------
    incoming : Layer or tuple
        Input ``(batch, channels, rows, cols)``; all but the batch size must
        be known.
    num_filters : int
        Number of output channels.
    filter_size : int or (int, int)
        Odd sizes (``'same'`` padding).
    stride : int or (int, int)
        Must be 1 (kept for the convolution layers' signature).
    pad : 'same'
        The only padding supported (kept for the signature).
    untie_biases : bool
        One bias per output position and channel, ``(num_filters, rows,
        cols)``, instead of one per channel.
    W : initializer, array or expression
        ``(num_filters, channels, filter_rows, filter_cols, rows, cols)``, or
        ``(num_filters, filter_rows, filter_cols, rows, cols)`` with
        ``channelwise=True``; ``GlorotUniform()`` by default.
    b : initializer, array, expression or None
        Biases (not regularizable); ``None`` for none.
    nonlinearity : callable or None
        ``rectify`` by default; ``None`` means the identity.
    flip_filters : bool
        ``True`` (the default) flips the filters as a convolution does;
        ``False`` applies them as a correlation.
    channelwise : bool
        If ``True``, output channel ``k`` sees only input channel ``k``
        (``num_filters`` must equal the number of input channels).

    Raises
    ------
    NotImplementedError
        For a stride other than 1 or padding other than ``'same'`` (as
        Lasagne).
    ValueError
        If an input size other than the batch size is unknown, or
        ``channelwise`` is set and ``num_filters`` differs from the number
        of input channels.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = LocallyConnected2DLayer(InputLayer((None, 3, 5, 5)), 4, 3)
    >>> l.output_shape, l.W.get_value().shape, l.b.get_value().shape
    ((None, 4, 5, 5), (4, 3, 3, 3, 5, 5), (4,))
    """

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = (1, 1),
        pad: int | str | Sequence[int] = "same",
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = True,
        channelwise: bool = False,
        **kwargs: Any,
    ) -> None:
        # get_W_shape (called by the base class) needs to know this.
        self.channelwise = channelwise
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride=stride,
            pad=pad,
            untie_biases=untie_biases,
            W=W,
            b=b,
            nonlinearity=nonlinearity,
            flip_filters=flip_filters,
            **kwargs,
        )
        if self.stride != (1, 1):
            raise NotImplementedError(
                f"LocallyConnected2DLayer requires stride=1 / (1, 1), but got {stride!r}."
            )
        if self.pad != "same":
            raise NotImplementedError(
                f"LocallyConnected2DLayer requires pad='same', but got {pad!r}."
            )

    def get_W_shape(self):
        """``(num_filters, [channels,] filter_rows, filter_cols, rows, cols)``."""
        if any(s is None for s in self.input_shape[1:]):
            raise ValueError(
                "A LocallyConnected2DLayer requires a fixed input shape (except for the batch "
                f"size). Got {self.input_shape!r}."
            )
        channels = self.input_shape[1]
        out_rows, out_cols = self.get_output_shape_for(self.input_shape)[-2:]
        if self.channelwise:
            if self.num_filters != channels:
                raise ValueError(
                    "num_filters and the number of input channels should match when "
                    f"channelwise is true, but got num_filters={self.num_filters!r} and "
                    f"{channels} input channels"
                )
            return (self.num_filters, *self.filter_size, out_rows, out_cols)
        return (self.num_filters, channels, *self.filter_size, out_rows, out_cols)

    def _windows(self, input):
        """``(batch, channels * taps, rows, cols)``: every input value each filter tap sees.

        Channel ``c * taps + i * filter_cols + j`` holds, at output position
        ``(y, x)``, the input of channel ``c`` at ``(y + i - filter_rows // 2,
        x + j - filter_cols // 2)`` (zero outside): the value that filter tap
        ``(i, j)`` multiplies.  It is a grouped correlation with one-hot
        filters, a single convolution node (fast to compile under Numba).
        """
        fh, fw = self.filter_size
        channels = self.input_shape[1]
        taps = fh * fw
        one_hot = np.zeros((channels * taps, 1, fh, fw), dtype=input.dtype)
        for c in range(channels):
            one_hot[c * taps : (c + 1) * taps, 0].reshape(taps, taps)[...] = np.eye(taps)
        return conv2d(input, one_hot, border_mode="half", filter_flip=False, num_groups=channels)

    def convolve(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        W = self.W
        if self.flip_filters:
            # a convolution applies tap (i, j) of the flipped filter
            W = W[:, ::-1, ::-1] if self.channelwise else W[:, :, ::-1, ::-1]
        windows = self._windows(input)
        fh, fw = self.filter_size
        rows, cols = self.output_shape[2:]
        channels = self.input_shape[1]
        taps = fh * fw
        if self.channelwise:
            # out[b, k] = sum over taps t of windows[b, k * taps + t] * W[k, t]
            products = windows * W.reshape((channels * taps, rows, cols))
            ones = np.ones((channels, taps, 1, 1), dtype=products.dtype)
            return conv2d(products, ones, filter_flip=False, num_groups=channels)
        # weights[y, x, c * taps + t, f] = W[f, c, i, j, y, x] with t = i * fw + j
        weights = W.dimshuffle(4, 5, 1, 2, 3, 0).reshape(
            (rows, cols, channels * taps, self.num_filters)
        )
        # one matrix product per position:
        # (rows, cols, batch, C*taps) @ (rows, cols, C*taps, F) -> (rows, cols, batch, F)
        out = pt.matmul(windows.dimshuffle(2, 3, 0, 1), weights)
        return out.dimshuffle(2, 3, 0, 1)
