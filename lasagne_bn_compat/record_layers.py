"""Record every layer's output of a Lasagne network, on legacy Theano or on lasagne_bn.

This file is meant to be copied to the machine that still runs Theano 1.0
and Lasagne (``lasagne-bn compare --print-recorder > record_layers.py``): it
imports only ``numpy``, ``theano`` and ``lasagne``, and keeps to syntax that
Python 2.7 and every Python 3 read, because that is where legacy models
live.  ``lasagne-bn compare`` (:mod:`lasagne_bn_compat.compare`) then builds
the same network on lasagne_bn, gives it the recorded parameters and inputs,
and names the first layer whose output differs.

Usage, with the Python that runs the legacy model::

    python record_layers.py build_net.py:build legacy_layers.npz [--inputs x.npz]
        [--batch 2] [--seed 0] [--set batch_norm_use_averages=False]

``build_net.py:build`` (or ``package.module:build``) names a function that
takes no arguments and returns the network's output layer (or a list of
output layers), as ``lasagne-bn inspect --lint`` takes it.  ``--inputs
FILE.npz`` gives the input values (``arr_0``, ``arr_1`` ... in the order of
the network's input layers, as ``numpy.savez(FILE, x)`` writes them);
without it, each input layer gets standard-normal values of its shape
(``None`` sizes become ``--batch``), drawn from
``numpy.random.RandomState(--seed)``.  ``--set NAME=VALUE`` passes a keyword
to ``lasagne.layers.get_output`` (a Python literal; ``deterministic=True``
unless set otherwise).

The ``.npz`` it writes holds ``input_<i>`` (the value of the i-th input
layer, in ``get_all_layers`` order), ``param_<i>`` (``get_all_params``
order, trainable or not), ``layer_<i>`` (the i-th layer's output) and
``meta`` (JSON as bytes: each layer's class and name, the parameter names,
the ``get_output`` keywords, and the library versions).
"""

from __future__ import print_function

import argparse
import ast
import importlib
import json
import os
import re
import sys

import numpy as np

#: Format of the file (bumped when its keys change).
FORMAT = 1


def load_builder(spec):
    """The function named by ``'path/to/file.py:name'`` or ``'package.module:name'``."""
    if ":" not in spec:
        raise ValueError(
            "builder %r: expected FILE.py:FUNCTION or MODULE:FUNCTION, such as "
            "build_net.py:build" % (spec,)
        )
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise ValueError("builder %r: no such file %r" % (spec, where))
        folder = os.path.dirname(os.path.abspath(where))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module = importlib.import_module(os.path.splitext(os.path.basename(where))[0])
    else:
        module = importlib.import_module(where)
    builder = getattr(module, name, None)
    if not callable(builder):
        raise ValueError("builder %r: %r has no function %r" % (spec, where, name))
    return builder


def parse_settings(items):
    """``['deterministic=True', ...]`` as a dict of ``get_output`` keywords."""
    settings = {"deterministic": True}
    for item in items or ():
        key, sep, text = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ValueError("--set %r: expected NAME=VALUE, such as deterministic=False" % item)
        try:
            settings[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ValueError(
                "--set %r: %r is not a Python literal (True, 0.5, 'text')" % (item, text)
            )
    return settings


def _as_list(network):
    return list(network) if isinstance(network, (list, tuple)) else [network]


def input_layers(layers):
    """The input layers among ``layers`` (``get_all_layers`` order)."""
    from lasagne.layers import InputLayer

    return [layer for layer in layers if isinstance(layer, InputLayer)]


def make_inputs(inputs, given, batch, seed):
    """One array per input layer: ``given`` in any of its forms, or seeded normal values."""
    if given is None:
        rng = np.random.RandomState(seed)
        made = []
        for layer in inputs:
            shape = tuple(batch if s is None else s for s in layer.shape)
            made.append(rng.standard_normal(shape).astype(layer.input_var.dtype))
        return made
    if isinstance(given, dict):
        by_name = {layer.name: layer for layer in inputs if layer.name}
        chosen = {}
        for key, value in given.items():
            layer = by_name.get(key, key)
            if layer not in inputs:
                raise ValueError("inputs: %r is not an input layer of the network" % (key,))
            chosen[layer] = value
        missing = [i for i, layer in enumerate(inputs) if layer not in chosen]
        if missing:
            raise ValueError("inputs: no value for input layer %d" % missing[0])
        return [np.asarray(chosen[layer]) for layer in inputs]
    values = given if isinstance(given, (list, tuple)) else [given]
    if len(values) != len(inputs):
        raise ValueError(
            "inputs: %d values for a network of %d input layers" % (len(values), len(inputs))
        )
    return [np.asarray(v) for v in values]


def layer_outputs(layers, inputs, values, settings):
    """The outputs of ``layers`` for ``values`` of their ``inputs`` (``theano.function``)."""
    import theano
    from lasagne.layers import get_output

    variables = [layer.input_var for layer in inputs]
    # each input layer's own input_var: get_output's default
    fn = theano.function(variables, get_output(layers, **settings), on_unused_input="ignore")
    return fn(*values)


def describe(layer):
    return {"class": type(layer).__name__, "name": layer.name}


def record(outputs, path, given=None, settings=None, batch=2, seed=0):
    """Write every layer's output of the network ``outputs`` to the ``.npz`` at ``path``.

    ``given`` holds the input values: one array, a list in the order of the
    network's input layers, or a dict from input layer (or its name) to
    array; None draws them from ``RandomState(seed)`` (``None`` sizes
    become ``batch``).  ``settings`` are ``get_output`` keywords
    (``deterministic=True`` by default).  Returns the number of layers
    recorded.
    """
    import lasagne
    import theano
    from lasagne.layers import get_all_layers, get_all_params

    settings = {"deterministic": True} if settings is None else dict(settings)
    outputs = _as_list(outputs)
    layers = get_all_layers(outputs)
    inputs = input_layers(layers)
    values = make_inputs(inputs, given, batch, seed)
    results = layer_outputs(layers, inputs, values, settings)
    params = get_all_params(outputs)
    data = {}
    for i, value in enumerate(values):
        data["input_%d" % i] = value
    for i, param in enumerate(params):
        data["param_%d" % i] = param.get_value()
    for i, value in enumerate(results):
        data["layer_%d" % i] = np.asarray(value)
    versions = {
        "numpy": np.__version__,
        "theano": getattr(theano, "__version__", "?"),
        "lasagne": getattr(lasagne, "__version__", "?"),
    }
    meta = {
        "format": FORMAT,
        "layers": [describe(layer) for layer in layers],
        "outputs": [layers.index(layer) for layer in outputs],
        "params": [param.name for param in params],
        "settings": settings,
        "versions": versions,
    }
    data["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez_compressed(path, **data)
    return len(layers)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Record every layer's output of a Lasagne network to an .npz file "
        "(for lasagne-bn compare)."
    )
    parser.add_argument("builder", help="FILE.py:FUNCTION or MODULE:FUNCTION")
    parser.add_argument("output", help="the .npz file to write")
    parser.add_argument("--batch", type=int, default=2, help="size of None dimensions (2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the made inputs (0)")
    parser.add_argument(
        "--inputs", metavar="FILE.npz", help="the input values: arr_0, arr_1 ... (numpy.savez)"
    )
    parser.add_argument(
        "--set", action="append", metavar="NAME=VALUE", help="a get_output keyword (repeatable)"
    )
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.set)
        outputs = load_builder(args.builder)()
        given = None
        if args.inputs:
            with np.load(args.inputs, allow_pickle=False) as saved:
                given = [saved["arr_%d" % i] for i in range(len(saved.files))]
    except (ValueError, KeyError, OSError) as exc:
        parser.error(str(exc))
    n = record(outputs, args.output, given, settings, args.batch, args.seed)
    print("recorded %d layers to %s" % (n, args.output))
    return 0


if __name__ == "__main__":
    # Run from inside lasagne_bn_compat, the script's folder would put the
    # shims' ``theano`` and ``lasagne`` first on the path, ahead of the real ones.
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, "lasagne")):
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.exit(main())
