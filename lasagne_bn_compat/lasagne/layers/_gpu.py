"""What the GPU-era layer modules (``dnn``, ``corrmm``, ``cuda_convnet``) share.

Those modules map Lasagne's cuDNN / CorrMM / cuda-convnet layers onto
lasagne_bn's portable layers; this one holds the two things they have in
common: a warning for options that only tuned the GPU kernels, and the
lookup of the layers (3-D convolution and pooling, spatial pyramid pooling)
some of them build on, which the lasagne_bn at hand may not have.
"""

from __future__ import annotations

import warnings

from lasagne_bn.layers.conv import BaseConvLayer
from lasagne_bn.ops.conv import conv2d

__all__ = ["GPUConv2DBase", "ignored_option", "missing_base_message", "portable_layer"]

_WARNED: set[tuple[str, str]] = set()


def ignored_option(layer: str, option: str, value, why: str) -> None:
    """Warn, once per layer class and option, that ``option=value`` has no effect here."""
    if (layer, option) in _WARNED:
        return
    _WARNED.add((layer, option))
    warnings.warn(
        f"{layer}: {option}={value!r} is ignored ({why}); the output is the same",
        UserWarning,
        stacklevel=3,
    )


def portable_layer(name: str) -> type | None:
    """``lasagne_bn.layers.<name>`` if this lasagne_bn has that layer, else None."""
    import lasagne_bn.layers

    cls = getattr(lasagne_bn.layers, name, None)
    return cls if isinstance(cls, type) else None


def missing_base_message(qualname: str, base: str) -> str:
    """The message for a legacy layer whose portable counterpart this build lacks."""
    return (
        f"{qualname} is computed by lasagne_bn.layers.{base}, which this lasagne_bn does "
        f"not have; use a lasagne_bn with {base}"
    )


class GPUConv2DBase(BaseConvLayer):
    """The convolution of Lasagne's ``Conv2DDNNLayer`` and ``Conv2DMMLayer``.

    cuDNN's ``dnn_conv`` and ``GpuCorrMM`` computed what ``Conv2DLayer``
    computes, on lasagne_bn's portable ``conv2d`` here; the subclasses keep
    the legacy constructors (``flip_filters=False`` by default).
    """

    def convolve(self, input, **kwargs):
        extra = {"num_groups": self.num_groups} if self.num_groups > 1 else {}
        return conv2d(
            input,
            self.W,
            self.input_shape,
            self.get_W_shape(),
            subsample=self.stride,
            border_mode=self._border_mode(),
            filter_flip=self.flip_filters,
            **extra,
        )
