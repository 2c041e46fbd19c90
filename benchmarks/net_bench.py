"""Whole networks, end to end: one training step and one inference, beside PyTorch CPU.

Four networks, each built with ``lasagne_bn.layers`` and the same
architecture written in PyTorch, starting from identical weights (the
Lasagne network's initial values, saved once by the driver and loaded by
every worker; convolution filters flipped for PyTorch where Lasagne's
``flip_filters=True`` convolves):

- ``resnet20``: a ResNet-20-style CIFAR-10 net, ``batch_norm(Conv2DLayer)``
  throughout, 3 stages x 3 basic blocks, 16/32/64 filters, 1x1 projection
  shortcuts where the shape changes, global average pooling, softmax;
  batch 128 of 32x32x3; categorical cross-entropy, Nesterov momentum.
- ``mlp``: 784-1024-1024-10 with ``batch_norm(DenseLayer)``, batch 256,
  categorical cross-entropy, Adam.
- ``lstm``: a batch-normalized input projection (``batch_norm`` of a
  ``DenseLayer`` over batch and time) into ``LSTMLayer`` (no peepholes, as
  ``torch.nn.LSTM``), the last hidden state into a softmax; batch 32,
  seq 50, 64 features, 128 units; Adam.
- ``dcgan``: generator 100-d noise -> dense 4x4x256 -> transposed
  convolutions 8x8x128 -> 16x16x64 -> 32x32x3 (batch norm, ReLU, tanh out)
  and a mirror discriminator (strided 4x4 convolutions, batch norm, leaky
  ReLU, sigmoid out); one step updates both networks with Adam from one
  forward pass (discriminator loss on a real and a generated batch,
  generator loss on the generated batch; simultaneous gradients, the same
  in PyTorch); batch 64.  Inference: sampling the generator.

Implementations, each in its own worker process:

- ``ours/default``: ``pytensor.function`` in the default mode as
  ``theano.function`` compiles it (``big_graph_mode()``: PyTensor's Numba
  mode, compiled node by node when a graph has more than 128 inputs plus
  outputs or 1000 nodes; the table says which);
- ``ours/JAX``: mode ``JAX``;
- ``ours/C``: mode ``C`` with the opt-in ``lasagne_bn_scipy_gemm`` rewrites
  (:func:`lasagne_bn.ops.c.gemm.c_mode`: dense layers and softmax in C without
  a BLAS), or ``CVM`` when that cannot compile the network (the table says
  which, and why);
- ``ours/portable``: the default mode with ``LASAGNE_BN_PORTABLE=1``: the
  portable convolution kernels (BLAS) instead of the tuned ones;
- ``ours/default-1thread``: the same with ``NUMBA_NUM_THREADS=1`` (what
  the default mode's parallel kernels cost or gain on a shared machine);
- ``torch``: PyTorch CPU, 2 threads, glibc's default allocator;
  ``torch+recycle``: the same with the glibc settings the ``ours/*``
  workers make with ``lasagne_bn.ops.recycle_host_memory()`` (see
  ``lasagne_bn/ops/host_memory.py``).

The workers are driven interleaved (a rotating order each repetition), each
sample is one or more back-to-back calls after an untimed one, and the
medians are printed as a markdown table with the load average.  Compile
time (building the function, first call excluded) is reported separately.
``--contend N`` starts N busy-loop processes for the timings (not the
builds) and ends them afterwards, also on error.  ``--profile NET`` prints
where ``ours/default``'s training step spends its time, per Op.

The tables are also written as JSON (``--json``, default
``benchmarks/results/net_bench.json``; ``--profile`` writes none), from
which ``benchmarks/report.py`` makes ``benchmarks/results/net_bench.md``.

Run:  python benchmarks/net_bench.py                  (all nets, ~5 minutes)
      python benchmarks/net_bench.py --contend 2      (loaded machine)
      python benchmarks/net_bench.py --nets mlp --tiny --reps 2 --json /tmp/net.json
                                                      (smoke test)
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

EPS = 1e-4  # batch-norm epsilon, Lasagne's default
NETS = ("resnet20", "mlp", "lstm", "dcgan")
IMPLS = (
    "ours/default",
    "ours/default-1thread",
    "ours/portable",
    "ours/JAX",
    "ours/C",
    "torch",
    "torch+recycle",
)
THREADS = 2

SIZES = {
    "full": {
        "resnet20": {"batch": 128, "size": 32, "filters": (16, 32, 64), "blocks": 3},
        "mlp": {"batch": 256, "inputs": 784, "hidden": 1024, "classes": 10},
        "lstm": {"batch": 32, "seq": 50, "features": 64, "units": 128, "classes": 10},
        "dcgan": {"batch": 64, "noise": 100, "channels": (256, 128, 64)},
    },
    "tiny": {
        "resnet20": {"batch": 4, "size": 8, "filters": (4, 8, 8), "blocks": 1},
        "mlp": {"batch": 8, "inputs": 20, "hidden": 16, "classes": 10},
        "lstm": {"batch": 4, "seq": 5, "features": 6, "units": 8, "classes": 10},
        "dcgan": {"batch": 4, "noise": 8, "channels": (16, 8, 4)},
    },
}


# --------------------------------------------------------------------------
# data: the same arrays in every worker


def make_data(net: str, cfg: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    if net == "resnet20":
        n, s = cfg["batch"], cfg["size"]
        x = rng.standard_normal((n, 3, s, s), dtype=np.float32)
        return {"x": x, "y": rng.integers(0, 10, n).astype(np.int32)}
    if net == "mlp":
        x = rng.standard_normal((cfg["batch"], cfg["inputs"]), dtype=np.float32)
        return {"x": x, "y": rng.integers(0, cfg["classes"], cfg["batch"]).astype(np.int32)}
    if net == "lstm":
        shape = (cfg["batch"], cfg["seq"], cfg["features"])
        x = rng.standard_normal(shape, dtype=np.float32)
        return {"x": x, "y": rng.integers(0, cfg["classes"], cfg["batch"]).astype(np.int32)}
    n = cfg["batch"]
    z = rng.standard_normal((n, cfg["noise"]), dtype=np.float32)
    x = np.tanh(rng.standard_normal((n, 3, 32, 32), dtype=np.float32))
    return {"z": z, "x": x}


# --------------------------------------------------------------------------
# the Lasagne networks


def lasagne_net(net: str, cfg: dict) -> dict:
    """Layers, symbolic inputs, training loss + updates, inference output.

    Returns a dict with ``outputs`` (the layers whose parameters make the
    network), ``train_inputs`` / ``infer_inputs`` (data keys and variables),
    ``loss``, ``updates`` and ``infer``.
    """
    import pytensor.tensor as pt

    from lasagne_bn import init
    from lasagne_bn import layers as L
    from lasagne_bn.nonlinearities import LeakyRectify, rectify, sigmoid, softmax, tanh
    from lasagne_bn.objectives import binary_crossentropy, categorical_crossentropy
    from lasagne_bn.updates import adam, nesterov_momentum

    if net == "resnet20":
        l_in = L.InputLayer((None, 3, cfg["size"], cfg["size"]), name="input")
        he = init.HeNormal(gain="relu")

        def conv(incoming, filters, size, stride, nonlin, name):
            layer = L.Conv2DLayer(
                incoming, filters, size, stride=stride, pad=size // 2, W=he, nonlinearity=nonlin,
                name=name,
            )  # fmt: skip
            return L.batch_norm(layer)

        h = conv(l_in, cfg["filters"][0], 3, 1, rectify, "conv0")
        channels = cfg["filters"][0]
        for stage, filters in enumerate(cfg["filters"]):
            for block in range(cfg["blocks"]):
                stride = 2 if stage > 0 and block == 0 else 1
                name = f"s{stage}b{block}"
                y = conv(h, filters, 3, stride, rectify, name + "c1")
                y = conv(y, filters, 3, 1, None, name + "c2")
                shortcut = h
                if stride != 1 or filters != channels:
                    shortcut = conv(h, filters, 1, stride, None, name + "proj")
                h = L.NonlinearityLayer(
                    L.ElemwiseSumLayer([y, shortcut], name=name + "sum"),
                    rectify,
                    name=name + "out",
                )
                channels = filters
        h = L.GlobalPoolLayer(h, name="pool")
        out = L.DenseLayer(h, 10, nonlinearity=softmax, name="fc")
        y = pt.ivector("y")
        loss = categorical_crossentropy(L.get_output(out), y).mean()
        params = L.get_all_params(out, trainable=True)
        updates = nesterov_momentum(loss, params, learning_rate=0.1, momentum=0.9)
        infer = L.get_output(out, deterministic=True)
        return {
            "outputs": [out],
            "train_inputs": {"x": l_in.input_var, "y": y},
            "infer_inputs": {"x": l_in.input_var},
            "loss": loss,
            "updates": updates,
            "infer": infer,
        }
    if net == "mlp":
        l_in = L.InputLayer((None, cfg["inputs"]), name="input")
        h = L.batch_norm(L.DenseLayer(l_in, cfg["hidden"], name="fc1"))
        h = L.batch_norm(L.DenseLayer(h, cfg["hidden"], name="fc2"))
        out = L.DenseLayer(h, cfg["classes"], nonlinearity=softmax, name="fc3")
        y = pt.ivector("y")
        loss = categorical_crossentropy(L.get_output(out), y).mean()
        updates = adam(loss, L.get_all_params(out, trainable=True))
        return {
            "outputs": [out],
            "train_inputs": {"x": l_in.input_var, "y": y},
            "infer_inputs": {"x": l_in.input_var},
            "loss": loss,
            "updates": updates,
            "infer": L.get_output(out, deterministic=True),
        }
    if net == "lstm":
        l_in = L.InputLayer((None, cfg["seq"], cfg["features"]), name="input")
        proj = L.DenseLayer(
            l_in, cfg["units"], b=None, nonlinearity=None, num_leading_axes=2, name="proj"
        )
        proj = L.batch_norm(proj, axes=(0, 1))
        lstm = L.LSTMLayer(
            proj, cfg["units"], peepholes=False, only_return_final=True, name="lstm"
        )
        out = L.DenseLayer(lstm, cfg["classes"], nonlinearity=softmax, name="fc")
        y = pt.ivector("y")
        loss = categorical_crossentropy(L.get_output(out), y).mean()
        updates = adam(loss, L.get_all_params(out, trainable=True))
        return {
            "outputs": [out],
            "train_inputs": {"x": l_in.input_var, "y": y},
            "infer_inputs": {"x": l_in.input_var},
            "loss": loss,
            "updates": updates,
            "infer": L.get_output(out, deterministic=True),
        }
    # dcgan
    c1, c2, c3 = cfg["channels"]
    g_in = L.InputLayer((None, cfg["noise"]), name="noise")
    g = L.batch_norm(L.DenseLayer(g_in, c1 * 16, name="g_fc"))
    g = L.ReshapeLayer(g, ([0], c1, 4, 4), name="g_reshape")
    g = L.batch_norm(L.TransposedConv2DLayer(g, c2, 4, stride=2, crop=1, name="g_up1"))
    g = L.batch_norm(L.TransposedConv2DLayer(g, c3, 4, stride=2, crop=1, name="g_up2"))
    gen = L.TransposedConv2DLayer(g, 3, 4, stride=2, crop=1, nonlinearity=tanh, name="g_up3")
    lrelu = LeakyRectify(0.2)
    d_in = L.InputLayer((None, 3, 32, 32), name="image")
    d = L.Conv2DLayer(d_in, c3, 4, stride=2, pad=1, nonlinearity=lrelu, name="d_conv1")
    d = L.batch_norm(L.Conv2DLayer(d, c2, 4, stride=2, pad=1, nonlinearity=lrelu, name="d_conv2"))
    d = L.batch_norm(L.Conv2DLayer(d, c1, 4, stride=2, pad=1, nonlinearity=lrelu, name="d_conv3"))
    disc = L.DenseLayer(d, 1, nonlinearity=sigmoid, name="d_fc")
    fake = L.get_output(gen)
    p_real = L.get_output(disc)
    # The generated batch's statistics do not update the discriminator's
    # averages: one running-average update per variable and step.
    p_fake = L.get_output(disc, {d_in: fake}, batch_norm_update_averages=False)
    loss_d = binary_crossentropy(p_real, 1.0).mean() + binary_crossentropy(p_fake, 0.0).mean()
    loss_g = binary_crossentropy(p_fake, 1.0).mean()
    updates = adam(loss_d, L.get_all_params(disc, trainable=True), 2e-4, beta1=0.5)
    updates.update(adam(loss_g, L.get_all_params(gen, trainable=True), 2e-4, beta1=0.5))
    return {
        "outputs": [gen, disc],
        "train_inputs": {"z": g_in.input_var, "x": d_in.input_var},
        "infer_inputs": {"z": g_in.input_var},
        "loss": loss_d + loss_g,
        "updates": updates,
        "infer": L.get_output(gen, deterministic=True),
    }


def lasagne_params(graph: dict) -> list:
    from lasagne_bn.layers import get_all_params

    params = get_all_params(graph["outputs"])
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise RuntimeError(f"parameter names are not unique: {names}")
    return params


def save_weights(net: str, cfg: dict, path: str) -> int:
    """Build the Lasagne network (no compile) and save its initial values by name."""
    from lasagne_bn.random import set_rng

    use_float32()
    set_rng(np.random.RandomState(0))
    params = lasagne_params(lasagne_net(net, cfg))
    np.savez(path, **{p.name: p.get_value() for p in params})
    return len(params)


def use_float32() -> None:
    import pytensor

    pytensor.config.floatX = "float32"


def count_trainable(graph: dict) -> int:
    from lasagne_bn.layers import get_all_params

    return sum(p.get_value().size for p in get_all_params(graph["outputs"], trainable=True))


def ours_impl(net: str, cfg: dict, mode_name: str, weights: str) -> dict:
    """Compile the training and inference functions; returns the worker's steps and facts."""
    import pytensor

    from lasagne_bn.ops.numba.linker import big_graph_mode, compiles_per_node

    use_float32()
    graph = lasagne_net(net, cfg)
    values = np.load(weights)
    for p in lasagne_params(graph):
        p.set_value(values[p.name])
    data = make_data(net, cfg)
    train_keys, infer_keys = list(graph["train_inputs"]), list(graph["infer_inputs"])
    facts = {"trainable": int(count_trainable(graph))}

    def compile_(mode):
        t = time.perf_counter()
        train = pytensor.function(
            list(graph["train_inputs"].values()), graph["loss"], updates=graph["updates"],
            mode=mode,
        )  # fmt: skip
        infer = pytensor.function(list(graph["infer_inputs"].values()), graph["infer"], mode=mode)
        return train, infer, time.perf_counter() - t

    if mode_name == "default":
        train, infer, seconds = compile_(big_graph_mode())
        facts["mode"] = "default: " + "/".join(
            "per-node" if compiles_per_node(f.maker.fgraph) else "whole-graph"
            for f in (train, infer)
        )
        facts["interface"] = len(train.maker.fgraph.inputs) + len(train.maker.fgraph.outputs)
    elif mode_name == "C":
        try:
            from lasagne_bn.ops.c.gemm import c_mode

            train, infer, seconds = compile_(c_mode())
            train(*[data[k] for k in train_keys])  # mode C may compile and fail on a call
            for p in lasagne_params(graph):
                p.set_value(values[p.name])
            facts["mode"] = "C"
        except Exception as exc:  # noqa: BLE001 - any failure means "C cannot run it"
            reason = f"{type(exc).__name__}{_failing_op(exc)}"
            train, infer, seconds = compile_("CVM")
            facts["mode"] = "CVM (C failed: " + reason + ")"
    else:
        train, infer, seconds = compile_(mode_name)
        facts["mode"] = mode_name
    facts["compile_s"] = seconds
    train_args = [data[k] for k in train_keys]
    infer_args = [data[k] for k in infer_keys]
    return {
        "train": lambda: block(train(*train_args)),
        "infer": lambda: block(infer(*infer_args)),
        "facts": facts,
        "function": train,
    }


def block(result):
    """Wait for asynchronous (JAX) results, also inside lists and tuples."""
    if isinstance(result, list | tuple):
        for item in result:
            block(item)
    elif hasattr(result, "block_until_ready"):
        result.block_until_ready()
    return result


def _failing_op(exc: BaseException) -> str:
    """' in <Op>' for the innermost traceback frame that was handling an Op, or ''."""
    tb, op = exc.__traceback__, None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("op")
        if candidate is not None and hasattr(candidate, "make_node"):
            op = candidate
        tb = tb.tb_next
    return f" in {type(op).__name__}" if op is not None else ""


# --------------------------------------------------------------------------
# the PyTorch networks (same architectures, same initial values)


def torch_impl(net: str, cfg: dict, weights: str) -> dict:
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    w = dict(np.load(weights))

    def tensor(a):
        return torch.from_numpy(np.array(a, copy=True, order="C"))

    def conv(name, stride, pad, flip=True, bias=False):
        W = w[name + ".W"]
        layer = nn.Conv2d(W.shape[1], W.shape[0], W.shape[2:], stride, pad, bias=bias)
        layer.weight.data = tensor(W[:, :, ::-1, ::-1] if flip else W)
        if bias:
            layer.bias.data = tensor(w[name + ".b"])
        return layer

    def deconv(name, bias=False):
        # (in, out, rows, cols) as ConvTranspose2d's; Lasagne's flip_filters=False
        # transposes a convolution (Theano's filter_flip=True), PyTorch's a correlation.
        W = w[name + ".W"]
        layer = nn.ConvTranspose2d(W.shape[0], W.shape[1], W.shape[2:], 2, 1, bias=bias)
        layer.weight.data = tensor(W[:, :, ::-1, ::-1])
        if bias:
            layer.bias.data = tensor(w[name + ".b"])
        return layer

    def bn(name, kind=nn.BatchNorm2d):
        gamma = w[name + ".gamma"]
        layer = kind(gamma.shape[0], eps=EPS, momentum=0.1)
        layer.weight.data, layer.bias.data = tensor(gamma), tensor(w[name + ".beta"])
        layer.running_mean.data = tensor(w[name + ".mean"])
        layer.running_var.data = tensor(1.0 / w[name + ".inv_std"] ** 2 - EPS)
        return layer

    def dense(name, bias=True):
        W = w[name + ".W"]
        layer = nn.Linear(W.shape[0], W.shape[1], bias=bias)
        layer.weight.data = tensor(W.T)
        if bias:
            layer.bias.data = tensor(w[name + ".b"])
        return layer

    data = {k: tensor(v) for k, v in make_data(net, cfg).items()}

    if net == "resnet20":

        class Block(nn.Module):
            def __init__(self, name, stride, project):
                super().__init__()
                self.c1, self.b1 = conv(name + "c1", stride, 1), bn(name + "c1_bn")
                self.c2, self.b2 = conv(name + "c2", 1, 1), bn(name + "c2_bn")
                self.proj = None
                if project:
                    self.proj = nn.Sequential(conv(name + "proj", stride, 0), bn(name + "proj_bn"))

            def forward(self, x):
                y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
                return F.relu(y + (x if self.proj is None else self.proj(x)))

        blocks = [conv("conv0", 1, 1), bn("conv0_bn"), nn.ReLU()]
        channels = cfg["filters"][0]
        for stage, filters in enumerate(cfg["filters"]):
            for block in range(cfg["blocks"]):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(
                    Block(f"s{stage}b{block}", stride, stride != 1 or filters != channels)
                )
                channels = filters
        blocks += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), dense("fc")]
        model = nn.Sequential(*blocks)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        loss_of = lambda: F.cross_entropy(model(data["x"]), data["y"].long())  # noqa: E731
        infer_of = lambda: F.softmax(model(data["x"]), dim=1)  # noqa: E731
        models = [model]
    elif net == "mlp":
        model = nn.Sequential(
            dense("fc1", bias=False), bn("fc1_bn", nn.BatchNorm1d), nn.ReLU(),
            dense("fc2", bias=False), bn("fc2_bn", nn.BatchNorm1d), nn.ReLU(),
            dense("fc3"),
        )  # fmt: skip
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
        loss_of = lambda: F.cross_entropy(model(data["x"]), data["y"].long())  # noqa: E731
        infer_of = lambda: F.softmax(model(data["x"]), dim=1)  # noqa: E731
        models = [model]
    elif net == "lstm":
        units = cfg["units"]

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = dense("proj", bias=False)
                self.bn = bn("proj_bn", nn.BatchNorm1d)
                self.lstm = nn.LSTM(units, units, batch_first=True)
                gates = ("ingate", "forgetgate", "cell", "outgate")  # torch's i, f, g, o
                cat = lambda kind: np.concatenate(  # noqa: E731
                    [w[f"lstm.{kind}_{g}"].T for g in gates]
                )
                self.lstm.weight_ih_l0.data = tensor(cat("W_in_to"))
                self.lstm.weight_hh_l0.data = tensor(cat("W_hid_to"))
                self.lstm.bias_ih_l0.data = tensor(
                    np.concatenate([w[f"lstm.b_{g}"] for g in gates])
                )
                # One bias per gate, as Lasagne: the second stays 0 and frozen.
                self.lstm.bias_hh_l0.data.zero_()
                self.lstm.bias_hh_l0.requires_grad_(False)
                self.fc = dense("fc")

            def forward(self, x):
                n, t, _ = x.shape
                h = self.bn(self.proj(x).reshape(n * t, units)).reshape(n, t, units)
                out, _ = self.lstm(h)
                return self.fc(out[:, -1])

        model = Net()
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        loss_of = lambda: F.cross_entropy(model(data["x"]), data["y"].long())  # noqa: E731
        infer_of = lambda: F.softmax(model(data["x"]), dim=1)  # noqa: E731
        models = [model]
    else:
        c1 = cfg["channels"][0]
        gen = nn.Sequential(
            dense("g_fc", bias=False), bn("g_fc_bn", nn.BatchNorm1d), nn.ReLU(),
            nn.Unflatten(1, (c1, 4, 4)),
            deconv("g_up1"), bn("g_up1_bn"), nn.ReLU(),
            deconv("g_up2"), bn("g_up2_bn"), nn.ReLU(),
            deconv("g_up3", bias=True), nn.Tanh(),
        )  # fmt: skip
        disc = nn.Sequential(
            conv("d_conv1", 2, 1, bias=True), nn.LeakyReLU(0.2),
            conv("d_conv2", 2, 1), bn("d_conv2_bn"), nn.LeakyReLU(0.2),
            conv("d_conv3", 2, 1), bn("d_conv3_bn"), nn.LeakyReLU(0.2),
            nn.Flatten(), dense("d_fc"), nn.Sigmoid(),
        )  # fmt: skip
        opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
        bce = F.binary_cross_entropy

        def gan_step():
            fake = gen(data["z"])
            p_real, p_fake = disc(data["x"]), disc(fake)
            loss_d = bce(p_real, torch.ones_like(p_real)) + bce(p_fake, torch.zeros_like(p_fake))
            loss_g = bce(p_fake, torch.ones_like(p_fake))
            d_params, g_params = list(disc.parameters()), list(gen.parameters())
            grads_d = torch.autograd.grad(loss_d, d_params, retain_graph=True)
            grads_g = torch.autograd.grad(loss_g, g_params)
            for p, g in zip(d_params + g_params, grads_d + grads_g, strict=True):
                p.grad = g
            opt_d.step()
            opt_g.step()
            return float((loss_d + loss_g).detach())

        def gan_infer():
            gen.eval()
            with torch.no_grad():
                out = gen(data["z"])
            gen.train()
            return out

        models = [gen, disc]
        count = sum(p.numel() for m in models for p in m.parameters() if p.requires_grad)
        return {"train": gan_step, "infer": gan_infer, "facts": {"trainable": count}}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        opt.step()
        return float(loss.detach())

    def infer():
        model.eval()
        with torch.no_grad():
            out = infer_of()
        model.train()
        return out

    count = sum(p.numel() for m in models for p in m.parameters() if p.requires_grad)
    return {"train": step, "infer": infer, "facts": {"trainable": count}}


# --------------------------------------------------------------------------
# workers


def build(name: str, net: str, cfg: dict, weights: str) -> dict:
    if name.startswith("torch"):
        t = time.perf_counter()
        impl = torch_impl(net, cfg, weights)
        impl["facts"]["compile_s"] = time.perf_counter() - t
        impl["facts"]["mode"] = f"PyTorch CPU, {THREADS} threads"
        return impl
    mode = name.partition("/")[2].removesuffix("-1thread")
    return ours_impl(net, cfg, "default" if mode == "portable" else mode, weights)


def check_value(result) -> float:
    """A number to compare implementations by: a loss, or an output's mean."""
    result = result[0] if isinstance(result, list | tuple) else result
    if hasattr(result, "detach"):
        result = result.detach().numpy()
    return float(np.mean(np.asarray(result, dtype=np.float64)))


def worker_loop(name: str, net: str, size: str, weights: str) -> None:
    if name.startswith("ours/"):
        # Timed with freed buffers recycled, as the published tables were
        # (importing lasagne_bn.ops did it until issue 16).
        from lasagne_bn.ops import recycle_host_memory

        recycle_host_memory()
    cfg = SIZES[size][net]
    impl = build(name, net, cfg, weights)
    facts = impl["facts"]
    t = time.perf_counter()
    facts["infer_check"] = check_value(impl["infer"]())
    facts["loss"] = check_value(impl["train"]())  # the loss before the first update
    facts["first_calls_s"] = time.perf_counter() - t
    print(json.dumps(facts), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        kind, calls, lead = line.split()
        # One untimed lead call: the first after a pause wakes thread pools
        # (which a call of a second or more does not notice).
        if lead == "1":
            impl[kind]()
        t = time.perf_counter()
        for _ in range(int(calls)):
            impl[kind]()
        print((time.perf_counter() - t) * 1e3 / int(calls), flush=True)


def worker_env(name: str) -> dict:
    env = dict(os.environ)
    if name.endswith("-1thread"):
        env["NUMBA_NUM_THREADS"] = "1"
    if name == "ours/portable":
        env["LASAGNE_BN_PORTABLE"] = "1"
    if name == "torch+recycle":
        env["MALLOC_MMAP_THRESHOLD_"] = str(256 * 2**20)
        env["MALLOC_TRIM_THRESHOLD_"] = str(512 * 2**20)
    return env


class Worker:
    """One implementation of one network in its own process."""

    def __init__(self, name: str, net: str, size: str, weights: str):
        self.name = name
        cmd = [sys.executable, os.path.abspath(__file__), "--_worker", name, net, size, weights]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env(name)
        )
        self.facts = json.loads(self._read())

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} died (see its traceback above)")
        return line.strip()

    def step(self, kind: str, calls: int = 1, lead: bool = True) -> float:
        """Mean ms per call over ``calls`` back-to-back calls, after an untimed one if ``lead``."""
        self.proc.stdin.write(f"{kind} {calls} {int(lead)}\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


SAMPLE_MS = 200.0  # each sample: back-to-back calls for about this long


LEAD_MS = 500.0  # calls faster than this get an untimed lead call before each sample
SLOW_MS = 2000.0  # implementations slower than this per call get ``slow_reps`` samples


def time_interleaved(workers: dict, kind: str, reps: int, slow_reps: int) -> dict[str, float]:
    """Median ms per call, the implementations in a rotating order each repetition.

    Each sample is back-to-back calls lasting about SAMPLE_MS (at least one)
    after one untimed call (none for calls over LEAD_MS); implementations
    slower than SLOW_MS per call (the NumPy reference under CVM on a conv
    net) get ``slow_reps`` samples.
    """
    names = list(workers)
    calls, wanted, lead = {}, {}, {}
    for name in names:
        single = workers[name].step(kind, 1, lead=False)
        calls[name] = max(1, min(50, int(SAMPLE_MS / max(single, 1e-3))))
        wanted[name] = reps if single < SLOW_MS else max(1, min(reps, slow_reps))
        lead[name] = single < LEAD_MS
    samples: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            if rep >= wanted[name]:
                continue
            time.sleep(0.01)
            samples[name].append(workers[name].step(kind, calls[name], lead[name]))
    return {n: statistics.median(v) for n, v in samples.items()}


# --------------------------------------------------------------------------
# load


class Contention:
    """``n`` busy-loop processes, ended on exit from the ``with`` block (or the program)."""

    def __init__(self, n: int):
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self):
        for _ in range(self.n):
            proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            self.procs.append(proc)
        atexit.register(self.stop)
        time.sleep(0.5 if self.n else 0)
        return self

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.procs = []

    def __exit__(self, *exc):
        self.stop()
        atexit.unregister(self.stop)


def load_average() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# --------------------------------------------------------------------------
# per-Op profile of ours/default's training step


def profile_ours(net: str, size: str, calls: int, step: str = "train") -> None:
    """Time each node of the default mode's training (or inference) step, summed per Op.

    A graph compiled node by node (``NumbaNodeLinker``) is run node by node
    here with a timer around each call; a whole-graph Numba function has no
    per-node timing, so the same graph is then compiled with
    ``NumbaNodeLinker(max_interface=0)`` (the same node functions) for the
    profile.
    """
    from collections import defaultdict

    from pytensor.compile.mode import Mode, get_mode

    from lasagne_bn.ops import recycle_host_memory
    from lasagne_bn.ops.numba.linker import NumbaNodeLinker, _NodeProgram

    # as in the timed workers (worker_loop): without it every large output
    # faults its pages in afresh and an elementwise node looks 4x slower
    recycle_host_memory()
    cfg = SIZES[size][net]
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.npz")
        save_weights(net, cfg, weights)
        mode = Mode(
            linker=NumbaNodeLinker(max_interface=0, max_nodes=0),
            optimizer=get_mode("NUMBA").provided_optimizer,
        )
        import pytensor

        graph = lasagne_net(net, cfg)
        values = np.load(weights)
        for p in lasagne_params(graph):
            p.set_value(values[p.name])
        if step == "train":
            fn = pytensor.function(
                list(graph["train_inputs"].values()), graph["loss"], updates=graph["updates"],
                mode=mode,
            )  # fmt: skip
        else:
            fn = pytensor.function(
                list(graph["infer_inputs"].values()), graph["infer"], mode=mode
            )  # fmt: skip
    data = make_data(net, cfg)
    args = [data[k] for k in graph[f"{step}_inputs"]]
    program = _find_program(fn)
    if program is None or not isinstance(program, _NodeProgram):
        raise RuntimeError("could not find the node program of the compiled function")
    fn(*args)
    per_op: dict[str, float] = defaultdict(float)
    per_node: dict[int, float] = defaultdict(float)
    shapes: dict[int, str] = {}
    count: dict[str, int] = defaultdict(int)
    wall = []
    original = program.steps
    for _ in range(calls):
        timed = [
            (node, _timed(_timed(node_fn, k, per_node, shapes), _op_key(node), per_op), *rest)
            for k, (node, node_fn, *rest) in enumerate(original)
        ]
        program.steps = timed
        t = time.perf_counter()
        fn(*args)
        wall.append(time.perf_counter() - t)
        program.steps = original
    for node, *_ in original:
        count[_op_key(node)] += 1
    total = sum(per_op.values())
    step_ms = statistics.median(wall) * 1e3
    print(
        f"\nper-Op profile of ours/default's {step} step, {net} ({size}), {calls} calls, "
        f"{len(original)} nodes; median step {step_ms:.1f} ms (profiling adds a timer per "
        f"node); {load_average()}"
    )
    print("| Op | nodes | ms per step | share |")
    print("|---|---|---|---|")
    for key, seconds in sorted(per_op.items(), key=lambda kv: -kv[1])[:25]:
        ms = seconds * 1e3 / calls
        print(f"| {key} | {count[key]} | {ms:.2f} | {seconds / total:.1%} |")
    print(f"| (all nodes) | {len(original)} | {total * 1e3 / calls:.2f} | 100% |")
    print("\nslowest nodes:\n\n| node | input shapes | ms per step |\n|---|---|---|")
    for k, seconds in sorted(per_node.items(), key=lambda kv: -kv[1])[:12]:
        op = original[k][0].op
        name = _op_key(original[k][0])
        if hasattr(op, "subsample"):
            name = f"{type(op).__name__} stride {op.subsample}"
        print(f"| {name} | {shapes.get(k, '')} | {seconds * 1e3 / calls:.2f} |")


def _timed(fn, key, totals: dict, shapes: dict | None = None):
    """``fn`` with its wall time added to ``totals[key]`` on each call.

    ``shapes``: also note the argument shapes under ``key``.
    """

    def timed(*args):
        if shapes is not None:
            shapes[key] = " ".join(str(getattr(a, "shape", "()")) for a in args)
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            totals[key] += time.perf_counter() - t

    return timed


def _op_key(node) -> str:
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    if isinstance(op, Elemwise):
        return f"Elemwise{{{type(op.scalar_op).__name__}}}"
    text = str(op)
    return text if len(text) < 60 else type(op).__name__


def _find_program(fn):
    """The ``_NodeProgram`` a ``NumbaNodeLinker`` function runs (PyTensor keeps it in the VM)."""
    from lasagne_bn.ops.numba.linker import _NodeProgram

    seen = set()
    stack = [fn.vm]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, _NodeProgram):
            return obj
        for attr in ("jit_fn", "fn", "thunk", "thunks", "__wrapped__", "__closure__"):
            value = getattr(obj, attr, None)
            if value is None:
                continue
            if isinstance(value, list | tuple):
                for item in value:
                    stack.append(getattr(item, "cell_contents", item))
            else:
                stack.append(value)
        if hasattr(obj, "__dict__"):
            stack.extend(v for v in vars(obj).values() if callable(v) or hasattr(v, "__dict__"))
    return None


# --------------------------------------------------------------------------


def run_net(
    net: str, impls: list[str], size: str, reps: int, slow_reps: int, loads: list[int]
) -> list[dict]:
    """Build every implementation once, then time them under each load in turn.

    Prints one table per load and returns their rows as records.
    """
    cfg = SIZES[size][net]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, f"{net}.npz")
        save_weights(net, cfg, weights)
        workers: dict[str, Worker] = {}
        try:
            for name in impls:
                workers[name] = Worker(name, net, size, weights)
                f = workers[name].facts
                print(
                    f"  built {name:14s} {net}: compile {f['compile_s']:6.1f} s, first calls "
                    f"{f['first_calls_s']:6.1f} s; {f['mode']}; loss {f['loss']:.5f}, "
                    f"inference mean {f['infer_check']:.5f}",
                    flush=True,
                )
            facts = {n: w.facts for n, w in workers.items()}
            for contend in loads:
                with Contention(contend):
                    train, infer = (
                        time_interleaved(workers, kind, reps, slow_reps)
                        for kind in ("train", "infer")
                    )
                    load = load_average()
                records += print_table(net, cfg, facts, train, infer, load, contend)
        finally:
            for w in workers.values():
                w.close()
    return records


def print_table(net, cfg, facts, train, infer, load, contend) -> list[dict]:
    """Print one table; return its rows as records (keyed by the printed column names)."""
    anchor = "torch"
    t_ref, i_ref = train.get(anchor), infer.get(anchor)
    title = f"{net} {cfg}; {contend} busy processes; {load}"
    print()
    print(f"### {title}")
    print()
    head = "| implementation | mode | train step ms | inference ms | train / torch |"
    head += " infer / torch | compile + first calls s | first loss | trainable params |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    records = []
    for name in train:
        f = facts[name]
        row = f"| {name} | {f['mode']} | {train[name]:.2f} | {infer[name]:.2f} | "
        if t_ref:
            row += f"{train[name] / t_ref:.2f} | {infer[name] / i_ref:.2f} | "
        else:
            row += "- | - | "
        row += f"{f['compile_s'] + f['first_calls_s']:.1f} | {f['loss']:.5f} | {f['trainable']} |"
        print(row)
        records.append(
            {
                "table": title,
                "implementation": name,
                "mode": f["mode"],
                "train step ms": train[name],
                "inference ms": infer[name],
                "train / torch": train[name] / t_ref if t_ref else None,
                "infer / torch": infer[name] / i_ref if t_ref else None,
                "compile + first calls s": f["compile_s"] + f["first_calls_s"],
                "first loss": f["loss"],
                "trainable params": f["trainable"],
            }
        )
    losses = [f["loss"] for f in facts.values()]
    if not all(np.isfinite(losses)):
        print("\nWARNING: a first-step loss is not finite")
    elif max(losses) - min(losses) > 1e-2 * max(1.0, abs(np.median(losses))):
        print(f"\nWARNING: first-step losses differ: {losses}")
    print()
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", nargs="*", default=list(NETS), choices=NETS)
    parser.add_argument("--impl", nargs="*", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--reps", type=int, default=7, help="repetitions per timing")
    parser.add_argument("--slow-reps", type=int, default=2, help="repetitions for CVM on conv")
    parser.add_argument(
        "--contend", type=int, nargs="+", default=[0],
        help="busy-loop processes during the timings; several values: one table per load, "
        "from the same workers",
    )  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--profile", choices=NETS, help="per-Op profile of ours/default's step")
    parser.add_argument("--profile-calls", type=int, default=3)
    parser.add_argument(
        "--profile-step", choices=("train", "infer"), default="train",
        help="which step --profile times",
    )  # fmt: skip
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the tables as JSON (default benchmarks/results/net_bench.json; "
        "not written with --profile)",
    )
    parser.add_argument("--_worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = "tiny" if args.tiny else "full"
    if args._worker:
        worker_loop(*args._worker)
        return 0
    if args.profile:
        with Contention(args.contend[0]):
            profile_ours(args.profile, size, args.profile_calls, args.profile_step)
        return 0
    import torch

    print(
        f"net_bench: torch {torch.__version__} ({THREADS} threads); float32; "
        f"medians of {args.reps} interleaved repetitions ({args.slow_reps} for CVM); "
        f"--contend {' '.join(map(str, args.contend))}; {load_average()}",
        flush=True,
    )
    records = []
    for net in args.nets:
        records += run_net(net, args.impl, size, args.reps, args.slow_reps, args.contend)
    from _results import write

    load = f"busy-loop processes per table: {' '.join(map(str, args.contend))}; {load_average()}"
    print(f"results: {write('net_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
