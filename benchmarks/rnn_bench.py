"""LSTM training-step speed: our LSTMLayer against the same LSTM written with plain scan.

One SGD step (forward, backward through time, parameter updates) of an
LSTM with peepholes on a ``(batch, seq, features)`` input, mean-squared
loss on all hidden states, in the default (Numba) mode:

- ours: ``lasagne_bn.layers.LSTMLayer`` + ``get_output`` + ``pytensor.grad``;
- plain: the same maths written directly with ``pytensor.scan`` (stacked
  gate weights, input projection before the loop), on the same shared
  parameters: the anchor the layer must not be slower than.

Both functions are compiled once and timed interleaved (the order rotates
each repetition); medians are reported with the load average, because
these machines are shared.  Both train the same parameters, so every call
starts from the same state: the parameter values are reset before each
timed call (not timed).

The table is also written as JSON (``--json``, default
``benchmarks/results/rnn_bench.json``), from which ``benchmarks/report.py``
makes ``benchmarks/results/rnn_bench.md``.

Run:  python benchmarks/rnn_bench.py            (batch 32, seq 50, 128 units)
      python benchmarks/rnn_bench.py --reps 5   (quicker)
      python benchmarks/rnn_bench.py --batch 2 --seq 3 --features 4 --units 4 --reps 1 \\
          --json /tmp/rnn.json                  (smoke test)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import pytensor
import pytensor.tensor as pt

from lasagne_bn.layers import InputLayer, LSTMLayer, get_all_params, get_output


def load_average() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def build_ours(l_in, layer, lr):
    params = get_all_params(layer, trainable=True)
    loss = pt.mean(get_output(layer) ** 2)
    grads = pytensor.grad(loss, params)
    updates = [(p, p - lr * g) for p, g in zip(params, grads, strict=True)]
    return pytensor.function([l_in.input_var], loss, updates=updates)


def build_plain(x, layer, lr):
    """The LSTM of ``layer`` (same shared variables) written with plain ``pytensor.scan``."""
    gates = ("ingate", "forgetgate", "cell", "outgate")
    W_in = pt.concatenate([getattr(layer, f"W_in_to_{g}") for g in gates], axis=1)
    W_hid = pt.concatenate([getattr(layer, f"W_hid_to_{g}") for g in gates], axis=1)
    b = pt.concatenate([getattr(layer, f"b_{g}") for g in gates])
    p_i, p_f, p_o = layer.W_cell_to_ingate, layer.W_cell_to_forgetgate, layer.W_cell_to_outgate
    n = layer.num_units
    xs = pt.dot(x.dimshuffle(1, 0, 2), W_in) + b
    batch = x.shape[0]

    def step(x_t, c, h, W_hid, p_i, p_f, p_o):
        z = x_t + pt.dot(h, W_hid)
        i = pt.sigmoid(z[:, :n] + c * p_i)
        f = pt.sigmoid(z[:, n : 2 * n] + c * p_f)
        c_new = f * c + i * pt.tanh(z[:, 2 * n : 3 * n])
        o = pt.sigmoid(z[:, 3 * n :] + c_new * p_o)
        return c_new, o * pt.tanh(c_new)

    c0 = pt.broadcast_to(layer.cell_init, (batch, n))
    h0 = pt.broadcast_to(layer.hid_init, (batch, n))
    _, hs = pytensor.scan(
        step,
        sequences=[xs],
        outputs_info=[c0, h0],
        non_sequences=[W_hid, p_i, p_f, p_o],
        strict=True,
        return_updates=False,
    )
    loss = pt.mean(hs.dimshuffle(1, 0, 2) ** 2)
    params = get_all_params(layer, trainable=True)
    grads = pytensor.grad(loss, params)
    updates = [(p, p - lr * g) for p, g in zip(params, grads, strict=True)]
    return pytensor.function([x], loss, updates=updates)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=50)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default benchmarks/results/rnn_bench.json)",
    )
    args = parser.parse_args(argv)
    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()
    floatx = pytensor.config.floatX
    rng = np.random.default_rng(0)
    data = rng.standard_normal((args.batch, args.seq, args.features)).astype(floatx)
    l_in = InputLayer((None, args.seq, args.features))
    layer = LSTMLayer(l_in, args.units)
    params = get_all_params(layer)
    start = [p.get_value() for p in params]

    built = {}
    for name, make in (
        ("ours", lambda: build_ours(l_in, layer, 0.01)),
        ("plain", lambda: build_plain(pt.tensor3("x"), layer, 0.01)),
    ):
        t = time.perf_counter()
        built[name] = make()
        print(f"  built {name:6s} in {time.perf_counter() - t:6.1f} s", flush=True)

    losses = {}
    for name, f in built.items():  # warm up, and check both compute the same step
        for p, v in zip(params, start, strict=True):
            p.set_value(v)
        losses[name] = float(f(data))
    assert np.isclose(losses["ours"], losses["plain"], rtol=1e-5), losses

    times = {name: [] for name in built}
    order = list(built)
    for rep in range(args.reps):
        for name in order[rep % 2 :] + order[: rep % 2]:
            for p, v in zip(params, start, strict=True):
                p.set_value(v)
            t = time.perf_counter()
            built[name](data)
            times[name].append((time.perf_counter() - t) * 1e3)
    ms = {name: statistics.median(v) for name, v in times.items()}

    print()
    load = load_average()
    title = (
        f"LSTM training step, batch {args.batch}, seq {args.seq}, {args.features} features, "
        f"{args.units} units, {floatx}, default mode (Numba); medians of {args.reps} "
        f"interleaved repetitions; {load}"
    )
    print(title)
    print("| implementation | train step ms | / plain scan |")
    print("|---|---|---|")
    records = []
    for name, label in (("ours", "ours/LSTMLayer"), ("plain", "plain/pytensor.scan")):
        print(f"| {label} | {ms[name]:.3f} | {ms[name] / ms['plain']:.2f} |")
        records.append(
            {
                "table": title,
                "implementation": label,
                "train step ms": ms[name],
                "/ plain scan": ms[name] / ms["plain"],
            }
        )
    from _results import write

    print(f"results: {write('rnn_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
