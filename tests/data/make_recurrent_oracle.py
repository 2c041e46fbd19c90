"""Generate tests/data/recurrent_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

Not run by the tests (they must not need Theano).  Run from tests/data with
the legacy stack described in /work/shared/LEGACY_ORACLE.md:

    PYTHONPATH=<Lasagne master> \
    THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=<cache> \
        <Theano 1.0.5 venv>/bin/python make_recurrent_oracle.py

For each configuration ``<case>`` the file holds the input ``<case>_x``
(and ``<case>_mask``), the parameter values in ``get_all_params`` order
(``<case>_param_<i>``) with their names (``<case>_param_names``) and
trainable flags, a fixed cotangent ``<case>_r``, the layer output
``<case>_out`` and the gradients of ``sum(out * r)`` with respect to each
trainable parameter (``<case>_grad_<i>``, indices into the parameter
list) and to the input (``<case>_grad_x``).  Parameters are Lasagne's
default initialisations under a fixed NumPy seed, except that biases and
initial states get random values so that they matter.  Everything is
float64.
"""

import sys

# Theano 1.0.5's Cython scan does not compile on Python 3.11 (longintrepr.h);
# a failed import makes scan fall back to its Python implementation, while
# the rest of the graph keeps Theano's C code (convolutions need it).
sys.modules["theano.scan_module.scan_perform_ext"] = None

import lasagne  # noqa: E402
import numpy as np  # noqa: E402
import theano  # noqa: E402
import theano.tensor as T  # noqa: E402
from lasagne.layers import (  # noqa: E402
    Conv2DLayer,
    CustomRecurrentLayer,
    DenseLayer,
    GRULayer,
    InputLayer,
    LSTMLayer,
    RecurrentLayer,
    get_all_params,
    get_output,
)

out = {}


def mask_for(batch, seq_len, rng):
    lengths = rng.randint(1, seq_len + 1, size=batch)
    lengths[0] = seq_len
    return (np.arange(seq_len)[None, :] < lengths[:, None]).astype("float64")


def record(case, build, x_shape, with_mask=False, seed=0):
    rng = np.random.RandomState(seed)
    lasagne.random.set_rng(np.random.RandomState(seed + 1))
    x = rng.randn(*x_shape)
    l_in = InputLayer((None,) + x_shape[1:])
    l_mask = InputLayer((None, x_shape[1])) if with_mask else None
    layer = build(l_in, l_mask)
    params = get_all_params(layer)
    for p in params:
        if p.name.endswith(("init", ".b")) or p.name.split(".")[-1].startswith("b"):
            p.set_value(rng.randn(*p.get_value().shape) * 0.3)
    trainable = get_all_params(layer, trainable=True)
    inputs = [l_in.input_var] + ([l_mask.input_var] if with_mask else [])
    values = [x] + ([mask_for(x_shape[0], x_shape[1], rng)] if with_mask else [])
    y = get_output(layer)
    r = rng.randn(*[x_shape[0]] + list(layer.output_shape[1:]))
    loss = T.sum(y * r)
    grads = T.grad(loss, trainable + [l_in.input_var])
    f = theano.function(inputs, [y] + grads)
    results = f(*values)
    out[case + "_x"] = x
    if with_mask:
        out[case + "_mask"] = values[1]
    out[case + "_r"] = r
    out[case + "_param_names"] = np.array([p.name for p in params])
    out[case + "_trainable"] = np.array([p in trainable for p in params])
    for i, p in enumerate(params):
        out[f"{case}_param_{i}"] = p.get_value()
    out[case + "_out"] = results[0]
    for p, g in zip(trainable, results[1:-1], strict=True):
        out[f"{case}_grad_{params.index(p)}"] = g
    out[case + "_grad_x"] = results[-1]


# 1. LSTM with a mask and peepholes, learnt initial states
record(
    "lstm",
    lambda l_in, l_mask: LSTMLayer(l_in, 4, mask_input=l_mask, learn_init=True, name="lstm"),
    (3, 5, 2),
    with_mask=True,
    seed=1,
)

# 2. the same with gradient clipping and truncated back-propagation, no precomputation
record(
    "lstm_clip",
    lambda l_in, l_mask: LSTMLayer(
        l_in,
        4,
        mask_input=l_mask,
        grad_clipping=0.05,
        gradient_steps=2,
        precompute_input=False,
        nonlinearity=lasagne.nonlinearities.rectify,
    ),
    (3, 5, 2),
    with_mask=True,
    seed=2,
)

# 3. GRU, backwards, only the final state, input with trailing axes to flatten
record(
    "gru",
    lambda l_in, l_mask: GRULayer(
        l_in, 3, backwards=True, only_return_final=True, learn_init=True, mask_input=l_mask
    ),
    (2, 4, 2, 3),
    with_mask=True,
    seed=3,
)

# 4. GRU with gradient clipping, no precomputation
record(
    "gru_clip",
    lambda l_in, l_mask: GRULayer(l_in, 3, grad_clipping=0.02, precompute_input=False),
    (2, 4, 3),
    seed=4,
)

# 5. RecurrentLayer (dense input-to-hidden), backwards, masked.  (With gradient_steps
# as well, Theano 1.0.5's gradient fails here with a shape error in the backward scan.)
record(
    "rnn",
    lambda l_in, l_mask: RecurrentLayer(
        l_in,
        3,
        backwards=True,
        mask_input=l_mask,
        nonlinearity=lasagne.nonlinearities.tanh,
        W_hid_to_hid=lasagne.init.Normal(0.5),
        learn_init=True,
        name="rnn",
    ),
    (3, 5, 2),
    with_mask=True,
    seed=5,
)


# 6. CustomRecurrentLayer with convolutions input-to-hidden and hidden-to-hidden
def conv_rnn(l_in, l_mask):
    in_to_hid = Conv2DLayer(InputLayer((None, 1, 4, 4)), 2, 3, pad="same", nonlinearity=None)
    hid_to_hid = Conv2DLayer(
        InputLayer(in_to_hid.output_shape), 2, 3, pad="same", nonlinearity=None, b=None
    )
    return CustomRecurrentLayer(
        l_in, in_to_hid, hid_to_hid, learn_init=True, nonlinearity=lasagne.nonlinearities.tanh
    )


record("conv", conv_rnn, (2, 3, 1, 4, 4), seed=6)


# 7. CustomRecurrentLayer with dense sub-networks, input not precomputed, final state
def dense_rnn(l_in, l_mask):
    in_to_hid = DenseLayer(InputLayer((None, 2)), 3, nonlinearity=None)
    hid_to_hid = DenseLayer(InputLayer((None, 3)), 3, nonlinearity=None)
    return CustomRecurrentLayer(
        l_in,
        in_to_hid,
        hid_to_hid,
        precompute_input=False,
        only_return_final=True,
        mask_input=l_mask,
        grad_clipping=0.1,
    )


record("dense", dense_rnn, (3, 4, 2), with_mask=True, seed=7)

np.savez_compressed("recurrent_oracle.npz", **out)
print(sorted(out))
