"""Which layer differs: a network on lasagne_bn against outputs recorded on legacy Theano.

A model migrated from Theano + Lasagne that gives other outputs differs in
some layer first, and every layer after it inherits the difference.  The
recorder (:mod:`lasagne_bn_compat.record_layers`, a standalone file that
runs on the legacy stack) writes the inputs, the parameters and each
layer's output to an ``.npz``; :func:`compare_layers` builds the outputs of
the same network here from the same parameters and inputs and names the
first layer whose output is outside the tolerance, and by how much.
``lasagne-bn compare BUILDER RECORDED.npz`` does both steps from the
command line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from lasagne_bn_compat import record_layers

if TYPE_CHECKING:
    from pytensor.compile.mode import Mode

    from lasagne_bn.layers import Layer

__all__ = ["LayerComparison", "LayerResult", "compare_layers", "read_recording"]


@dataclass
class LayerResult:
    """How one layer's output compares with its recorded output.

    Attributes
    ----------
    index : int
        The layer's place in ``get_all_layers`` order.
    cls, name : str, str or None
        The layer's class name and ``name``.
    recorded_cls : str
        The class the recording names for this place.
    shape, recorded_shape : tuple
        The output's shape here and in the recording.
    max_abs : float
        The largest absolute difference (``inf`` where the shapes differ or
        only one side is NaN).
    excess : float
        The largest ``|ours - recorded| / (atol + rtol * |recorded|)``: above
        1 the output differs, and by that many times the tolerance.

    Examples
    --------
    >>> LayerResult(3, "DenseLayer", "out", "DenseLayer", (2, 3), (2, 3), 0.0, 0.0).ok
    True
    """

    index: int
    cls: str
    name: str | None
    recorded_cls: str
    shape: tuple
    recorded_shape: tuple
    max_abs: float
    excess: float

    @property
    def ok(self) -> bool:
        """Whether the output matches the recording within the tolerance."""
        return self.excess <= 1.0

    def label(self) -> str:
        """The layer as the summary names it: ``layer 3 DenseLayer 'out'``."""
        name = f" {self.name!r}" if self.name else ""
        return f"layer {self.index} {self.cls}{name}"


@dataclass
class LayerComparison:
    """Every layer's :class:`LayerResult`, in ``get_all_layers`` order.

    ``str()`` gives a table and a last line naming the first layer that
    differs (or saying that all match).

    Examples
    --------
    >>> row = LayerResult(0, "InputLayer", None, "InputLayer", (2, 3), (2, 3), 0.0, 0.0)
    >>> print(LayerComparison([row], rtol=1e-4, atol=1e-5).summary())
    all 1 layers match the recording (rtol=0.0001, atol=1e-05)
    """

    layers: list[LayerResult]
    rtol: float
    atol: float
    settings: dict = field(default_factory=dict)

    @property
    def first_difference(self) -> LayerResult | None:
        """The first layer whose output differs, or None."""
        return next((row for row in self.layers if not row.ok), None)

    @property
    def ok(self) -> bool:
        """Whether every layer matches."""
        return self.first_difference is None

    def summary(self) -> str:
        """One line: the first layer that differs and by how much, or that all match."""
        tol = f"rtol={self.rtol:g}, atol={self.atol:g}"
        first = self.first_difference
        if first is None:
            return f"all {len(self.layers)} layers match the recording ({tol})"
        if first.shape != first.recorded_shape:
            how = f"output shape {first.shape}, recorded {first.recorded_shape}"
        else:
            how = f"max |difference| {first.max_abs:.3g}, {first.excess:.3g}x the tolerance"
        return (
            f"first difference: {first.label()}: {how} ({tol}); the layers after it "
            "take its output, so look at this one first"
        )

    def __str__(self) -> str:
        lines = ["| layer | class | name | shape | max abs diff | x tolerance |"]
        lines.append("|---" * 6 + "|")
        for row in self.layers:
            cls = row.cls if row.cls == row.recorded_cls else f"{row.cls} ({row.recorded_cls})"
            mark = "" if row.ok else " <-"
            lines.append(
                f"| {row.index} | {cls} | {row.name or ''} | {row.shape} | {row.max_abs:.3g} "
                f"| {row.excess:.3g}{mark} |"
            )
        return "\n".join([*lines, "", self.summary()])


@dataclass
class Recording:
    """A recorder file's contents: inputs, parameters, layer outputs and meta."""

    inputs: list[np.ndarray]
    params: list[np.ndarray]
    outputs: list[np.ndarray]
    meta: dict


def _numbered(arrays: dict, prefix: str, where: str) -> list[np.ndarray]:
    found = sorted(int(k[len(prefix) :]) for k in arrays if k.startswith(prefix))
    if found != list(range(len(found))):
        raise ValueError(f"recorded: {where} has {prefix}<i> entries with gaps: {found}")
    return [arrays[f"{prefix}{i}"] for i in found]


def read_recording(path: str | os.PathLike) -> Recording:
    """Read a file written by the recorder, with :mod:`lasagne_bn_compat.io`'s safe reader.

    Examples
    --------
    >>> read_recording("missing.npz")
    Traceback (most recent call last):
    ...
    ValueError: recorded: no such file 'missing.npz'
    """
    from lasagne_bn_compat import io as cio

    if not os.path.isfile(path):
        raise ValueError(f"recorded: no such file {os.fspath(path)!r}")
    checkpoint = cio.read_checkpoint(path)
    arrays = dict(zip(checkpoint.names, checkpoint.values, strict=True))
    where = os.fspath(path)
    meta_bytes = arrays.pop("meta", None)
    if meta_bytes is None or meta_bytes.dtype != np.uint8:
        raise ValueError(
            f"recorded: {where!r} has no 'meta' entry; expected a file written by "
            "record_layers.py (lasagne-bn compare --print-recorder)"
        )
    try:
        meta = json.loads(meta_bytes.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"recorded: {where!r} has a 'meta' entry that is not JSON") from None
    if meta.get("format") != record_layers.FORMAT:
        raise ValueError(
            f"recorded: {where!r} is format {meta.get('format')!r}; this reader reads "
            f"format {record_layers.FORMAT}"
        )
    return Recording(
        _numbered(arrays, "input_", where),
        _numbered(arrays, "param_", where),
        _numbered(arrays, "layer_", where),
        meta,
    )


def _check_tolerance(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name}={value!r}: expected a number >= 0")
    return float(value)


def _difference(ours: np.ndarray, recorded: np.ndarray, rtol: float, atol: float):
    """``(max_abs, excess)`` of two outputs of one shape (NaN equal to NaN)."""
    if ours.size == 0:
        return 0.0, 0.0
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(recorded, dtype=np.float64)
    same_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & (a == b)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same_nan | same_inf, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bound = atol + rtol * np.abs(np.where(np.isfinite(b), b, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(diff == 0, 0.0, diff / bound)
    return float(diff.max()), float(excess.max())


def compare_layers(
    network: Layer | Sequence[Layer],
    recorded: str | os.PathLike | Recording,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    settings: dict | None = None,
    mode: str | Mode | None = None,
) -> LayerComparison:
    """Compare every layer's output of ``network`` with a legacy run's recording.

    The network's parameters are set to the recorded ones (they must match
    in number and shape), the recorded inputs are fed to its input layers,
    and every layer's output is computed in one ``pytensor.function`` with
    the recording's ``get_output`` keywords.

    Parameters
    ----------
    network : Layer or list of Layer
        The output layer(s) of the network, built as the legacy script
        builds it (through ``lasagne_bn_compat`` or with ``lasagne_bn.layers``).
    recorded : str, os.PathLike or Recording
        The file ``record_layers.py`` wrote on the legacy stack.
    rtol, atol : float
        An element differs where ``|ours - recorded| > atol + rtol * |recorded|``.
    settings : dict, optional
        ``get_output`` keywords instead of the recorded ones.
    mode : optional
        The PyTensor mode to compile in (default: PyTensor's).

    Returns
    -------
    LayerComparison

    Raises
    ------
    ValueError
        If the network has another number of layers, parameters or inputs
        than the recording, or a parameter or input of another shape.

    Examples
    --------
    On the legacy machine the recorder runs as a script (``python
    record_layers.py build_net.py:build layers.npz``); here it records on
    this stack, through the shims:

    >>> import os, tempfile
    >>> import lasagne_bn_compat
    >>> from lasagne_bn.layers import DenseLayer, InputLayer
    >>> from lasagne_bn_compat.record_layers import record
    >>> net = DenseLayer(InputLayer((None, 3), name="x"), 2, name="out")
    >>> path = os.path.join(tempfile.mkdtemp(), "layers.npz")
    >>> lasagne_bn_compat.install()
    >>> record(net, path)
    2
    >>> lasagne_bn_compat.uninstall()
    >>> result = compare_layers(net, path, mode="FAST_COMPILE")
    >>> result.ok, result.summary()
    (True, 'all 2 layers match the recording (rtol=0.0001, atol=1e-05)')
    """
    import pytensor

    from lasagne_bn.layers import InputLayer, get_all_layers, get_all_params, get_output

    rtol, atol = _check_tolerance("rtol", rtol), _check_tolerance("atol", atol)
    rec = recorded if isinstance(recorded, Recording) else read_recording(recorded)
    outputs = list(network) if isinstance(network, Sequence) else [network]
    layers = get_all_layers(outputs)
    described = rec.meta["layers"]
    if len(layers) != len(described) or len(rec.outputs) != len(described):
        raise ValueError(
            f"network: {len(layers)} layers, the recording {len(described)}; build the "
            "network the recording was made from"
        )
    params = get_all_params(outputs)
    if len(params) != len(rec.params):
        raise ValueError(
            f"network: {len(params)} parameters, the recording {len(rec.params)} "
            f"({rec.meta.get('params')})"
        )
    for i, (param, value) in enumerate(zip(params, rec.params, strict=True)):
        if param.get_value(borrow=True).shape != value.shape:
            raise ValueError(
                f"network: parameter {i} {param.name!r} has shape "
                f"{param.get_value(borrow=True).shape}, the recording {value.shape}"
            )
    inputs = [layer for layer in layers if isinstance(layer, InputLayer)]
    if len(inputs) != len(rec.inputs):
        raise ValueError(f"network: {len(inputs)} input layers, the recording {len(rec.inputs)}")
    for i, (layer, value) in enumerate(zip(inputs, rec.inputs, strict=True)):
        shape = tuple(layer.shape)
        if len(shape) != value.ndim or any(
            s is not None and s != v for s, v in zip(shape, value.shape, strict=True)
        ):
            raise ValueError(
                f"network: input layer {i} has shape {shape}, the recorded input {value.shape}"
            )
    # checked all before changing any, so a refused call leaves the network as it was
    for param, value in zip(params, rec.params, strict=True):
        param.set_value(value.astype(param.dtype))
    kwargs = dict(rec.meta.get("settings", {}) if settings is None else settings)
    variables = [layer.input_var for layer in inputs]
    fn = pytensor.function(
        variables, get_output(layers, **kwargs), mode=mode, on_unused_input="ignore"
    )
    values = [v.astype(var.dtype) for v, var in zip(rec.inputs, variables, strict=True)]
    rows = []
    for i, (layer, ours, theirs, desc) in enumerate(
        zip(layers, fn(*values), rec.outputs, described, strict=True)
    ):
        ours = np.asarray(ours)
        if ours.shape != theirs.shape:
            max_abs = excess = float("inf")
        else:
            max_abs, excess = _difference(ours, theirs, rtol, atol)
        rows.append(
            LayerResult(
                i, type(layer).__name__, layer.name, desc["class"], ours.shape, theirs.shape,
                max_abs, excess,
            )
        )  # fmt: skip
    return LayerComparison(rows, rtol, atol, kwargs)
