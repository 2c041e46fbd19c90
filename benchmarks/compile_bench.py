"""Compile time and peak memory of whole training functions, per mode.

Builds a training function (loss, Nesterov-momentum updates of every
parameter, and the batch-norm running averages) for

- ``resnet50``: the ImageNet ResNet-50 (bottleneck blocks, 3-4-6-3 stages,
  ``batch_norm(Conv2DLayer)`` everywhere, projection shortcuts);
- ``unet``: a small U-Net (three levels, batch-normed 3x3 convolutions,
  max pooling down, transposed convolutions up, concatenated skips);
- ``cyclegan``: CycleGAN's two ResNet generators and two PatchGAN
  discriminators, all batch-normed, LSGAN and cycle losses, Adam on all
  four networks in one function (``--size 64`` by default; legacy used 256);

compiles it in a fresh subprocess per (network, mode), runs one step and
prints one row per compile: seconds to build the function, seconds for the
first step (the Numba and JAX backends compile on the first call), the
child's CPU seconds (wall times mean little on a shared machine), its peak
RSS (``ru_maxrss``) and peak address space (``VmPeak``).  Each child runs
under an address-space limit (``--limit-gb``) so a runaway compile fails
instead of taking the machine down.

The default mode's Numba cache makes a second compile of the same graph much
cheaper; ``--cold`` points PyTensor's compile directory at a fresh temporary
folder for every child, so every row is a cold compile.

The table is also written as JSON (``--json``, default
``benchmarks/results/compile_bench.json``), from which
``benchmarks/report.py`` makes ``benchmarks/results/compile_bench.md``.

Usage::

    python -m benchmarks.compile_bench                  # both nets, default + JAX
    python -m benchmarks.compile_bench --nets resnet50 --modes default --size 64 --cold
    python -m benchmarks.compile_bench --nets unet --modes fast_compile --size 8 --batch 1 \\
        --json /tmp/compile.json                        # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MODES = ("default", "numba_whole_graph", "jax", "fast_compile", "cvm")

# "default": the mode lasagne_bn compiles with when none is named (lasagne_bn_compat's
# ``theano.function``, ``lasagne-bn run``): PyTensor's default rewrites and
# Numba kernels, big graphs compiled node by node (ops/numba/linker.py).
# "numba_whole_graph": PyTensor's own NUMBA mode, the whole graph as one
# Numba function.


# --------------------------------------------------------------------------
# the networks (also used by tests/test_compile_memory.py at small sizes)


def resnet50(input_var=None, size: int = 224, batch: int = 2, num_classes: int = 1000):
    """The ImageNet ResNet-50 built from lasagne_bn layers; returns the output layer."""
    from lasagne_bn.layers import (
        Conv2DLayer,
        DenseLayer,
        ElemwiseSumLayer,
        GlobalPoolLayer,
        InputLayer,
        MaxPool2DLayer,
        NonlinearityLayer,
        batch_norm,
    )
    from lasagne_bn.nonlinearities import rectify, softmax

    def conv(incoming, filters, size, stride=1, nonlinearity=rectify):
        layer = Conv2DLayer(
            incoming,
            filters,
            size,
            stride=stride,
            pad="same",
            nonlinearity=nonlinearity,
            b=None,
        )
        return batch_norm(layer)

    def bottleneck(incoming, filters, stride):
        out = conv(incoming, filters, 1, stride)
        out = conv(out, filters, 3)
        out = conv(out, filters * 4, 1, nonlinearity=None)
        shortcut = incoming
        if stride != 1 or incoming.output_shape[1] != filters * 4:
            shortcut = conv(incoming, filters * 4, 1, stride, nonlinearity=None)
        return NonlinearityLayer(ElemwiseSumLayer([out, shortcut]), rectify)

    net = InputLayer((batch, 3, size, size), input_var)
    net = conv(net, 64, 7, 2)
    net = MaxPool2DLayer(net, 3, stride=2, ignore_border=False)
    for stage, (filters, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            net = bottleneck(net, filters, stride)
    net = GlobalPoolLayer(net)
    return DenseLayer(net, num_classes, nonlinearity=softmax)


def unet(input_var=None, size: int = 64, batch: int = 2, base: int = 16, num_classes: int = 2):
    """A three-level U-Net (batch-normed convolutions, transposed-convolution upsampling)."""
    from lasagne_bn.layers import (
        ConcatLayer,
        Conv2DLayer,
        DimshuffleLayer,
        InputLayer,
        MaxPool2DLayer,
        NonlinearityLayer,
        ReshapeLayer,
        TransposedConv2DLayer,
        batch_norm,
    )
    from lasagne_bn.nonlinearities import softmax

    def double_conv(incoming, filters):
        for _ in range(2):
            incoming = batch_norm(Conv2DLayer(incoming, filters, 3, pad="same"))
        return incoming

    net = InputLayer((batch, 3, size, size), input_var)
    skips = []
    filters = base
    for _ in range(3):
        net = double_conv(net, filters)
        skips.append(net)
        net = MaxPool2DLayer(net, 2)
        filters *= 2
    net = double_conv(net, filters)
    for skip in reversed(skips):
        filters //= 2
        net = batch_norm(TransposedConv2DLayer(net, filters, 2, stride=2))
        net = double_conv(ConcatLayer([net, skip]), filters)
    net = Conv2DLayer(net, num_classes, 1, nonlinearity=None)
    # per-pixel softmax over the classes
    net = DimshuffleLayer(net, (0, 2, 3, 1))
    net = ReshapeLayer(net, (-1, num_classes))
    return NonlinearityLayer(net, softmax)


def cyclegan_generator(input_var=None, size: int = 64, batch: int = 2, blocks: int = 6):
    """CycleGAN's ResNet generator: c7s1-32, d64, d128, residual blocks, u64, u32, c7s1-3."""
    from lasagne_bn.layers import (
        Conv2DLayer,
        ElemwiseSumLayer,
        InputLayer,
        NonlinearityLayer,
        TransposedConv2DLayer,
        batch_norm,
    )
    from lasagne_bn.nonlinearities import rectify, tanh

    def conv(incoming, filters, size_, stride=1, nonlinearity=rectify):
        pad = "same" if stride == 1 else size_ // 2
        return batch_norm(
            Conv2DLayer(
                incoming, filters, size_, stride=stride, pad=pad, nonlinearity=nonlinearity
            )
        )

    net = InputLayer((batch, 3, size, size), input_var)
    net = conv(net, 32, 7)
    net = conv(net, 64, 3, 2)
    net = conv(net, 128, 3, 2)
    for _ in range(blocks):
        out = conv(conv(net, 128, 3), 128, 3, nonlinearity=None)
        net = ElemwiseSumLayer([out, net])
    for filters in (64, 32):
        net = batch_norm(TransposedConv2DLayer(net, filters, 4, stride=2, crop=1))
    net = Conv2DLayer(net, 3, 7, pad="same", nonlinearity=None)
    return NonlinearityLayer(net, tanh)


def cyclegan_discriminator(input_var, size: int = 64, batch: int = 2):
    """CycleGAN's PatchGAN discriminator: C64-C128-C256-C512, a 1-channel patch map."""
    from lasagne_bn.layers import Conv2DLayer, InputLayer, batch_norm
    from lasagne_bn.nonlinearities import LeakyRectify

    lrelu = LeakyRectify(0.2)
    net = InputLayer((batch, 3, size, size), input_var)
    net = Conv2DLayer(net, 64, 4, stride=2, pad=1, nonlinearity=lrelu)
    for filters, stride in ((128, 2), (256, 2), (512, 1)):
        net = batch_norm(Conv2DLayer(net, filters, 4, stride=stride, pad=1, nonlinearity=lrelu))
    return Conv2DLayer(net, 1, 4, pad=1, nonlinearity=None)


def cyclegan_training_function(size: int, batch: int, mode):
    """One CycleGAN step (LSGAN losses, cycle loss x10, Adam on both generators and
    both discriminators) as one function, the way a single legacy script compiles it."""
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.layers import get_all_params, get_output
    from lasagne_bn.updates import adam

    a, b = pt.tensor4("a"), pt.tensor4("b")
    g_ab, g_ba = (
        cyclegan_generator(size=size, batch=batch),
        cyclegan_generator(size=size, batch=batch),
    )
    d_a, d_b = cyclegan_discriminator(None, size, batch), cyclegan_discriminator(None, size, batch)
    fake_b = get_output(g_ab, a)
    fake_a = get_output(g_ba, b)
    rec_a = get_output(g_ba, fake_b)
    rec_b = get_output(g_ab, fake_a)
    loss_g = (
        pt.mean((get_output(d_b, fake_b) - 1) ** 2)
        + pt.mean((get_output(d_a, fake_a) - 1) ** 2)
        + 10 * (pt.mean(abs(rec_a - a)) + pt.mean(abs(rec_b - b)))
    )
    loss_d = (
        pt.mean((get_output(d_b, b) - 1) ** 2)
        + pt.mean(get_output(d_b, fake_b) ** 2)
        + pt.mean((get_output(d_a, a) - 1) ** 2)
        + pt.mean(get_output(d_a, fake_a) ** 2)
    )
    params_g = get_all_params([g_ab, g_ba], trainable=True)
    params_d = get_all_params([d_a, d_b], trainable=True)
    updates = adam(loss_g, params_g, learning_rate=2e-4, beta1=0.5)
    updates.update(adam(loss_d, params_d, learning_rate=2e-4, beta1=0.5))
    fn = pytensor.function([a, b], [loss_g, loss_d], updates=updates, mode=mode)
    rng = np.random.default_rng(0)
    xs = [
        rng.uniform(-1, 1, (batch, 3, size, size)).astype(pytensor.config.floatX) for _ in range(2)
    ]
    return xs, fn, len(params_g) + len(params_d), len(fn.maker.fgraph.apply_nodes)


NETS = {"resnet50": resnet50, "unet": unet, "cyclegan": cyclegan_generator}


def training_function(net_name: str, size: int, batch: int, mode):
    """``(inputs, function)``: one Nesterov step on a random batch of ``net_name``."""
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.layers import get_all_params, get_output
    from lasagne_bn.objectives import categorical_crossentropy
    from lasagne_bn.updates import nesterov_momentum

    if net_name == "cyclegan":
        return cyclegan_training_function(size, batch, mode)
    x = pt.tensor4("x")
    net = NETS[net_name](x, size=size, batch=batch)
    prediction = get_output(net)
    rows = net.output_shape[0]
    targets = pt.ivector("targets")
    loss = categorical_crossentropy(prediction, targets).mean()
    params = get_all_params(net, trainable=True)
    updates = nesterov_momentum(loss, params, learning_rate=0.01, momentum=0.9)
    fn = pytensor.function([x, targets], loss, updates=updates, mode=mode)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, 3, size, size)).astype(pytensor.config.floatX)
    classes = net.output_shape[-1]
    ts = rng.integers(0, classes, rows).astype("int32")
    return (xs, ts), fn, len(params), len(fn.maker.fgraph.apply_nodes)


def _mode_object(name: str):
    if name == "default":
        from lasagne_bn.ops.numba.linker import big_graph_mode

        return big_graph_mode()
    if name == "numba_whole_graph":
        return "NUMBA"
    return name.upper()


def _peak_vm_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1])
    return 0


def child(net_name: str, mode_name: str, size: int, batch: int) -> dict:
    """Compile and run one step in this process; the figures as a dict."""
    import numpy as np

    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()

    t0 = time.perf_counter()
    inputs, fn, n_params, n_nodes = training_function(
        net_name, size, batch, _mode_object(mode_name)
    )
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss = float(np.sum(fn(*inputs)))
    step_s = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "net": net_name,
        "mode": mode_name,
        "input": [batch, 3, size, size],
        "params": n_params,
        "nodes": n_nodes,
        "compile_s": round(compile_s, 1),
        "step_s": round(step_s, 2),
        "loss_finite": bool(np.isfinite(loss)),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": usage.ru_maxrss // 1024,
        "peak_vm_mb": _peak_vm_kb() // 1024,
    }


def run_child(net_name, mode_name, size, batch, limit_gb, cold, timeout) -> dict:
    """Run ``child`` in a subprocess under an address-space limit."""
    env = dict(os.environ)
    tmp = None
    if cold:
        tmp = tempfile.TemporaryDirectory(prefix="compile_bench_")
        flags = env.get("PYTENSOR_FLAGS", "")
        env["PYTENSOR_FLAGS"] = ",".join(filter(None, [flags, f"base_compiledir={tmp.name}"]))
        env["NUMBA_CACHE_DIR"] = tmp.name
    limit = int(limit_gb * 2**30)

    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, "-m", "benchmarks.compile_bench", "--child", net_name, mode_name]
    cmd += ["--size", str(size), "--batch", str(batch)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, preexec_fn=set_limit, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        row = {"net": net_name, "mode": mode_name, "error": f"timeout after {timeout} s"}
    else:
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode == 0 and lines:
            row = json.loads(lines[-1])
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            row = {
                "net": net_name,
                "mode": mode_name,
                "error": f"exit {proc.returncode}: " + " | ".join(tail),
            }
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    row["children_maxrss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    if tmp is not None:
        tmp.cleanup()
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", nargs="+", default=list(NETS), choices=list(NETS))
    parser.add_argument("--modes", nargs="+", default=["default", "jax"], choices=MODES)
    parser.add_argument("--size", type=int, default=None, help="spatial input size")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--limit-gb", type=float, default=6.0, help="address-space limit")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--cold", action="store_true", help="a fresh compile cache per child")
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default benchmarks/results/compile_bench.json)",
    )
    parser.add_argument("--child", nargs=2, metavar=("NET", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        net_name, mode_name = args.child
        size = args.size or (224 if net_name == "resnet50" else 64)
        print(json.dumps(child(net_name, mode_name, size, args.batch)), flush=True)
        return

    header = (
        f"{'net':<9} {'mode':<18} {'input':<16} {'nodes':>6} {'compile s':>9} "
        f"{'1st step s':>10} {'CPU s':>6} {'peak RSS MB':>11} {'peak VM MB':>10}"
    )
    print(header)
    print("-" * len(header))
    title = (
        f"one fresh subprocess per row, "
        f"{'an empty compile cache each (--cold)' if args.cold else 'the usual compile caches'}, "
        f"batch {args.batch}, address-space limit {args.limit_gb:g} GB"
    )
    records = []
    for net_name in args.nets:
        size = args.size or (224 if net_name == "resnet50" else 64)
        for mode_name in args.modes:
            row = run_child(
                net_name, mode_name, size, args.batch, args.limit_gb, args.cold, args.timeout
            )
            records.append(_record(title, row))
            if "error" in row:
                print(f"{net_name:<9} {mode_name:<18} FAILED ({row['wall_s']} s): {row['error']}")
                continue
            shape = "x".join(map(str, row["input"]))
            print(
                f"{net_name:<9} {mode_name:<18} {shape:<16} {row['nodes']:>6} "
                f"{row['compile_s']:>9} {row['step_s']:>10} {row['cpu_s']:>6} "
                f"{row['peak_rss_mb']:>11} {row['peak_vm_mb']:>10}",
                flush=True,
            )
    # run as ``-m benchmarks.compile_bench``, this folder is not on the path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import write

    print(f"results: {write('compile_bench', records, path=args.json)}")


#: The printed columns (record key: child's key), then the figures the console leaves out.
COLUMNS = {
    "net": "net",
    "mode": "mode",
    "input": "input",
    "nodes": "nodes",
    "compile s": "compile_s",
    "1st step s": "step_s",
    "CPU s": "cpu_s",
    "peak RSS MB": "peak_rss_mb",
    "peak VM MB": "peak_vm_mb",
    "params": "params",
    "first step loss finite": "loss_finite",
    "wall s": "wall_s",
}


def _record(title: str, row: dict) -> dict:
    """One table row as a record; a failed child's has ``None`` figures and its error."""
    record = {"table": title, **{key: row.get(child) for key, child in COLUMNS.items()}}
    if record["input"] is not None:
        record["input"] = "x".join(map(str, record["input"]))
    if "error" in row:
        record["error"] = row["error"]
    return record


if __name__ == "__main__":
    main()
