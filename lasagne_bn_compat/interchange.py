"""Batch-norm networks to and from PyTorch, Keras 3 and Flax, with every convention explicit.

The same test-time network, four conventions:

========================  ===================  ===================  ====================
                          Lasagne / ours       PyTorch BatchNorm    Keras 3 / Flax
========================  ===================  ===================  ====================
second statistic          ``inv_std`` (or      ``running_var``      ``moving_variance``
                          ``var``)             (unbiased batch      / ``var`` (biased
                                               variances averaged)  batch variances)
test-time scale           ``gamma * inv_std``  ``w / sqrt(v+eps)``  ``g / sqrt(v+eps)``
moving-average weight     ``alpha``            ``momentum=alpha``   ``momentum=1-alpha``
epsilon                   inside the sqrt      inside the sqrt      inside the sqrt
dense weights             ``(in, out)``        ``(out, in)``        ``(in, out)``
convolution filters       flipped when         cross-correlation    cross-correlation
                          ``flip_filters``                          (channels last)
========================  ===================  ===================  ====================

The stored variance is carried over as the number that gives the same
test-time output (``var = 1 / inv_std**2 - epsilon``); training continues
with each framework's own averaging (unbiased for PyTorch and our ``var``
storage, biased for Keras and Flax), so continued training differs slightly.

:func:`to_torch_state_dict` / :func:`from_torch_state_dict` convert whole
networks of dense, convolution (1-3-D) and batch-norm layers: the state
dict's keys are ``<layer name>.<weight|bias|running_mean|running_var|
num_batches_tracked>``, so a PyTorch module whose submodules carry the layer
names (``nn.Sequential(OrderedDict(conv=..., conv_bn=...))``) loads it.
:func:`bn_to_keras` / :func:`bn_to_flax` (and ``*_from_*``) convert one
batch-norm layer's variables.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

__all__ = [
    "bn_from_flax",
    "bn_from_keras",
    "bn_to_flax",
    "bn_to_keras",
    "from_torch_state_dict",
    "to_torch_state_dict",
]


def _layers(network):
    from lasagne_bn.layers import get_all_layers

    return [layer for layer in get_all_layers(network) if layer.params]


def _test_time_var(bn) -> np.ndarray:
    from lasagne_bn.layers.bn_storage import inv_std_to_var, layer_epsilon

    if bn.stat_storage == "var":
        return np.asarray(bn.var.get_value(), np.float64)
    return inv_std_to_var(np.asarray(bn.inv_std.get_value(), np.float64), layer_epsilon(bn))


def _stat2_from_var(bn, var: np.ndarray) -> np.ndarray:
    from lasagne_bn.layers.bn_storage import check_statistic, layer_epsilon, var_to_inv_std

    check_statistic(var, "var", f"{bn.name}'s variance")
    return var if bn.stat_storage == "var" else var_to_inv_std(var, layer_epsilon(bn))


def _kind(layer) -> str:
    from lasagne_bn.layers.conv import BaseConvLayer
    from lasagne_bn.layers.dense import DenseLayer
    from lasagne_bn.layers.normalization import BatchNormLayer

    if isinstance(layer, BatchNormLayer):
        if [a for a in range(len(layer.input_shape)) if a not in layer.axes] != [1]:
            raise ValueError(
                f"layer {layer.name!r}: a batch norm over axes {layer.axes} has no PyTorch "
                "BatchNorm counterpart (those normalize per channel, axis 1)"
            )
        return "bn"
    if isinstance(layer, DenseLayer) and layer.num_leading_axes == 1:
        return "dense"
    if isinstance(layer, BaseConvLayer) and type(layer).get_W_shape is BaseConvLayer.get_W_shape:
        if getattr(layer, "untie_biases", False):
            raise ValueError(f"layer {layer.name!r}: untied biases have no PyTorch counterpart")
        return "conv"
    raise ValueError(
        f"layer {layer.name!r} ({type(layer).__name__}) has no PyTorch counterpart here: "
        "dense, convolution and batch-norm layers convert"
    )


def _conv_to_torch(layer, w: np.ndarray) -> np.ndarray:
    if layer.flip_filters:  # a true convolution: PyTorch correlates
        w = w[(slice(None), slice(None), *[slice(None, None, -1)] * (w.ndim - 2))]
    return np.ascontiguousarray(w)


def to_torch_state_dict(network, *, num_batches_tracked: int = 0) -> OrderedDict:
    """A PyTorch ``state_dict`` (NumPy arrays) for ``network``'s layers.

    Wrap the values with ``torch.from_numpy`` (or let ``load_state_dict``
    copy them: ``{k: torch.as_tensor(v) for k, v in sd.items()}``).

    Raises
    ------
    ValueError
        For a layer without a counterpart, or without a name (the keys are
        the layer names).
    """
    out: OrderedDict = OrderedDict()
    for layer in _layers(network):
        kind = _kind(layer)
        if not layer.name:
            raise ValueError(f"{type(layer).__name__} has no name: the state dict is keyed by it")
        key = layer.name
        if kind == "bn":
            shape = layer.param_shape
            gamma = np.ones(shape) if layer.gamma is None else layer.gamma.get_value()
            beta = np.zeros(shape) if layer.beta is None else layer.beta.get_value()
            dtype = layer.mean.dtype
            out[f"{key}.weight"] = np.asarray(gamma, dtype)
            out[f"{key}.bias"] = np.asarray(beta, dtype)
            out[f"{key}.running_mean"] = np.asarray(layer.mean.get_value(), dtype)
            out[f"{key}.running_var"] = _test_time_var(layer).astype(dtype)
            # alpha=None layers count their batches, as PyTorch's momentum=None
            counter = getattr(layer, "num_batches_tracked", None)
            count = num_batches_tracked if counter is None else counter.get_value()
            out[f"{key}.num_batches_tracked"] = np.asarray(count, np.int64)
            continue
        w = layer.W.get_value()
        out[f"{key}.weight"] = (
            np.ascontiguousarray(w.T) if kind == "dense" else _conv_to_torch(layer, w)
        )
        if layer.b is not None:
            out[f"{key}.bias"] = layer.b.get_value()
    return out


def from_torch_state_dict(network, state_dict) -> None:
    """Load a PyTorch ``state_dict`` (tensors or arrays) into ``network``, all or nothing.

    Every key the network needs must be there with the right shape; all
    values are checked and converted before any parameter changes.

    Raises
    ------
    KeyError
        A missing key (the message lists them).
    ValueError
        A shape that does not fit, or a negative / non-finite variance.
    """
    from lasagne_bn.layers import get_all_params

    def value(key):
        v = state_dict[key]
        v = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
        return v

    new = {}
    missing = []
    for layer in _layers(network):
        kind, key = _kind(layer), layer.name
        need = [f"{key}.weight"]
        if kind == "bn":
            need += [f"{key}.bias", f"{key}.running_mean", f"{key}.running_var"]
        elif layer.b is not None:
            need.append(f"{key}.bias")
        absent = [k for k in need if k not in state_dict]
        if absent:
            missing += absent
            continue
        if kind == "bn":
            pairs = [(layer.gamma, value(f"{key}.weight")), (layer.beta, value(f"{key}.bias"))]
            pairs += [(layer.mean, value(f"{key}.running_mean"))]
            var = value(f"{key}.running_var").astype(np.float64)
            if var.shape != layer.param_shape:
                raise ValueError(
                    f"{key}.running_var has shape {var.shape}; layer {key!r} needs "
                    f"{layer.param_shape}"
                )
            pairs.append((getattr(layer, layer.stat_storage), _stat2_from_var(layer, var)))
            counter = getattr(layer, "num_batches_tracked", None)
            if counter is not None and f"{key}.num_batches_tracked" in state_dict:
                pairs.append((counter, value(f"{key}.num_batches_tracked")))
        else:
            w = value(f"{key}.weight")
            w = w.T if kind == "dense" else _conv_to_torch(layer, w)  # flipping is its own inverse
            pairs = [(layer.W, w)]
            if layer.b is not None:
                pairs.append((layer.b, value(f"{key}.bias")))
        for param, v in pairs:
            if param is None:
                continue
            have = param.get_value(borrow=True)
            if tuple(np.shape(v)) != have.shape:
                raise ValueError(
                    f"{param.name}: the state dict's value has shape {tuple(np.shape(v))}; "
                    f"the parameter has {have.shape}; no parameter was changed"
                )
            new[param] = np.asarray(v, dtype=have.dtype)
    if missing:
        raise KeyError(f"the state dict lacks {missing}; no parameter was changed")
    for param in get_all_params(network):
        if param in new:
            param.set_value(new[param])


def bn_to_keras(bn) -> dict:
    """A batch-norm layer as Keras 3 ``BatchNormalization`` weights and settings."""
    shape = bn.param_shape
    if bn.alpha is None:
        raise ValueError(
            f"layer {bn.name!r} has alpha=None (a cumulative average), which Keras and Flax "
            "have no momentum for; set layer.alpha to a number first"
        )
    return {
        "gamma": np.ones(shape) if bn.gamma is None else bn.gamma.get_value(),
        "beta": np.zeros(shape) if bn.beta is None else bn.beta.get_value(),
        "moving_mean": bn.mean.get_value(),
        "moving_variance": _test_time_var(bn).astype(bn.mean.dtype),
        "momentum": 1 - float(bn.alpha),
        "epsilon": float(bn.epsilon),
    }


def bn_from_keras(bn, weights: dict) -> None:
    """Set a batch-norm layer from Keras 3 weights (gamma, beta, moving mean and variance)."""
    _set_bn(bn, weights["gamma"], weights["beta"], weights["moving_mean"],
            weights["moving_variance"])  # fmt: skip


def bn_to_flax(bn) -> dict:
    """A batch-norm layer as Flax ``nn.BatchNorm`` variables (``params`` and ``batch_stats``)."""
    keras = bn_to_keras(bn)
    return {
        "params": {"scale": keras["gamma"], "bias": keras["beta"]},
        "batch_stats": {"mean": keras["moving_mean"], "var": keras["moving_variance"]},
        "momentum": keras["momentum"],
        "epsilon": keras["epsilon"],
    }


def bn_from_flax(bn, variables: dict) -> None:
    """Set a batch-norm layer from Flax variables (``{'params': ..., 'batch_stats': ...}``)."""
    p, s = variables["params"], variables["batch_stats"]
    _set_bn(bn, p["scale"], p["bias"], s["mean"], s["var"])


def _set_bn(bn, gamma, beta, mean, var) -> None:
    values = []
    for param, v in ((bn.gamma, gamma), (bn.beta, beta), (bn.mean, mean)):
        if param is not None:
            values.append((param, np.asarray(v)))
    values.append((getattr(bn, bn.stat_storage), _stat2_from_var(bn, np.asarray(var, np.float64))))
    for param, v in values:
        if v.shape != bn.param_shape:
            raise ValueError(
                f"{param.name}: value of shape {v.shape}; the layer needs {bn.param_shape}; "
                "nothing was changed"
            )
    for param, v in values:
        param.set_value(v.astype(param.dtype))
