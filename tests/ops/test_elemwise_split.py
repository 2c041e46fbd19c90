"""Large elementwise nodes of a node-by-node program run in slabs over the kernel threads.

Each split node function must give the bits of PyTensor's own one-call
loop, on one thread and on two, for every way a node writes its outputs
(fresh, in place, both), with inputs broadcast on the first axis or not,
bound constants and views, in slabs of the first axis or of the flattened
arrays (and back to the first axis when an array is not C-contiguous); a
node that cannot be split (integers, an output broadcastable on its first
axis) compiles as before; mismatched shapes raise.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from kernel_threads import on_threads
from pytensor.compile.mode import NUMBA, Mode
from pytensor.tensor.elemwise import Elemwise

from lasagne_bn.ops.numba import linker as numba_linker
from lasagne_bn.ops.numba.elemwise import (
    MAX_SPLIT_OPERANDS,
    flat_node,
    slab_node,
    splittable,
)
from lasagne_bn.ops.numba.linker import NumbaNodeLinker


def _mode():
    return Mode(linker=NumbaNodeLinker(max_interface=0, max_nodes=0), optimizer=NUMBA.optimizer)


def _compile(inputs, outputs, split, updates=None):
    previous = numba_linker.SPLIT_ELEMWISE
    numba_linker.SPLIT_ELEMWISE = split
    try:
        return pytensor.function(inputs, outputs, updates=updates, mode=_mode())
    finally:
        numba_linker.SPLIT_ELEMWISE = previous


def _split_steps(f):
    return [s for s in f.vm.jit_fn.steps if splittable(s[0])]


rng = np.random.default_rng(0)
X = pt.tensor4("x", dtype="float32")
B = pt.tensor("b", dtype="float32", shape=(1, None, 1, 1))
S = pt.tensor("s", dtype="float32", shape=(1, 1, 1, 1))
V = pt.vector("v", dtype="float64")
M = pt.matrix("m", dtype="float32")
xs = rng.standard_normal((9, 3, 5, 4)).astype(np.float32)
bs = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
vs = rng.standard_normal(1001)
ms = rng.standard_normal((7, 33)).astype(np.float32)
# 4x4 rows, 3 * 1024 elements: several slabs of the flattened arrays
fs = rng.standard_normal((12, 16, 4, 4)).astype(np.float32)
ss = np.full((1, 1, 1, 1), 0.3, dtype=np.float32)

CASES = {
    # a fresh output, an input broadcast on the first axis
    "tanh_bias": ([X, B], lambda x, b: [pt.tanh(x + b) * 0.5], [xs, bs]),
    # a constant bound in the node, a view as input, two fresh outputs
    "two_outputs": (
        [X],
        lambda x: [0.6 * x[:, :, ::-1] + 0.4 * abs(x[:, :, ::-1]), pt.exp(-x) + 1],
        [xs],
    ),
    # one dimension, float64, an odd length
    "vector": ([V], lambda v: [pt.sigmoid(v) * v], [vs]),
    # the transposed matrix: a non-contiguous input
    "transposed": ([M], lambda m: [pt.sqrt(abs(m.T)) + m.T], [ms]),
    # full-shape inputs and one value: slabs of the flattened arrays
    "flat": ([X, S], lambda x, s: [x - s * x / (pt.sqrt(abs(x)) + 1e-3), x * s], [fs, ss]),
}


@pytest.fixture(scope="module")
def compiled_pairs():
    pairs = {}
    for name, (inputs, build, _) in CASES.items():
        outputs = build(*inputs)
        pairs[name] = (_compile(inputs, outputs, False), _compile(inputs, outputs, True))
    return pairs


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2, "auto"])
def test_split_nodes_give_the_bits_of_one_call(compiled_pairs, name, threads):
    plain, split = compiled_pairs[name]
    assert _split_steps(split), "no node of the case was split"
    args = CASES[name][2]
    want = plain(*[a.copy() for a in args])
    got = on_threads(threads, split, *[a.copy() for a in args])
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_flat_slabs_and_their_fallback(compiled_pairs):
    """The flat path runs where it can, and a strided argument takes the first-axis slabs."""
    plain, split = compiled_pairs["flat"]
    assert any(flat_node(s[0]) is not None for s in _split_steps(split))
    assert flat_node((X + B).owner) is None  # a per-channel input: not flat
    wide = np.repeat(fs, 2, axis=3)[..., ::2]  # the same values, not C-contiguous
    assert not wide.flags.c_contiguous
    for x in (fs, wide):
        want = plain(x, ss)
        got = on_threads(2, split, x, ss)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def test_in_place_updates_match_bitwise():
    """Adam-like updates: the rewrites make the node write into its inputs."""
    start = rng.standard_normal((65, 40))
    results = []
    for split in (False, True):
        w = pytensor.shared(start.copy(), name="w")
        m = pytensor.shared(np.zeros_like(start), name="m")
        g = pt.matrix("g", dtype="float64")
        m_new = 0.9 * m + 0.1 * g
        w_new = w - 0.01 * m_new / (pt.sqrt(m_new * m_new) + 1e-8)
        f = _compile([g], [], split, updates=[(m, m_new), (w, w_new)])
        steps = _split_steps(f)
        if split:
            assert any(s[0].op.destroy_map for s in steps), "no in-place node was split"
        grads = np.random.default_rng(1).standard_normal((3, *start.shape))
        for k in range(3):
            on_threads(2, f, grads[k])
        results.append((w.get_value(), m.get_value()))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_mismatched_shapes_raise():
    x, y = pt.matrix("x"), pt.matrix("y")
    f = _compile([x, y], [pt.exp(x) + y], True)
    assert _split_steps(f)
    with pytest.raises(ValueError, match="input shapes differ on axis 1") as info:
        f(np.ones((3, 2)), np.ones((3, 4)))
    assert "lasagne_bn: raised computing node" in "".join(info.value.__notes__)


def test_empty_outputs():
    x = pt.matrix("x")
    f = _compile([x], [pt.tanh(x)], True)
    assert f(np.ones((0, 5)))[0].shape == (0, 5)


def test_what_is_not_split():
    i = pt.imatrix("i")
    assert not splittable((i * 2).owner)
    assert not splittable((pt.cast(i, "float64") + 1).owner)
    row = pt.tensor("r", dtype="float64", shape=(1, None))
    assert not splittable(pt.exp(row).owner)
    assert not splittable(pt.exp(pt.matrix("h", dtype="float16")).owner)
    assert not splittable(pt.exp(pt.scalar("s")).owner)
    assert splittable(pt.exp(pt.matrix("x")).owner)
    f = _compile([i], [i * 2], True)
    np.testing.assert_array_equal(f(np.ones((2, 2), dtype="int32")), 2)


def _fan_out(n_outputs):
    """A matrix's Elemwise node with ``n_outputs`` outputs (one input): ``x + k``."""
    a = ps.float64()
    composite = ps.Composite([a], [a + k for k in range(n_outputs)])
    return Elemwise(composite)(pt.matrix("x"))[0].owner


def test_nodes_with_many_operands_are_not_split():
    # LLVM's time on a split node grows much faster than its operand count
    # (a fused update of 70 shared vectors: over four minutes cold).  A
    # fresh output counts twice: the split function also takes its buffer.
    most = (MAX_SPLIT_OPERANDS - 1) // 2
    assert splittable(_fan_out(most))
    wide = _fan_out(most + 1)
    assert 1 + 2 * len(wide.outputs) > MAX_SPLIT_OPERANDS
    assert not splittable(wide)
    # ... and an output computed in place once
    assert splittable(_in_place(MAX_SPLIT_OPERANDS // 2))
    assert not splittable(_in_place(MAX_SPLIT_OPERANDS // 2 + 1))


def _in_place(n):
    """An Elemwise node computing ``x_k + 1`` into ``x_k`` for ``n`` matrices."""
    a = [ps.float64() for _ in range(n)]
    op = Elemwise(ps.Composite(a, [v + 1 for v in a]), inplace_pattern={k: k for k in range(n)})
    return op(*[pt.matrix(f"x{k}") for k in range(n)])[0].owner


def test_slab_node_writes_every_output_in_place():
    x = pt.matrix("x")
    slab = slab_node(pt.exp(x).owner)
    assert slab.op.destroy_map == {0: [0]}
    assert slab.inputs[1] is x
    a = ps.float64("a")
    node = Elemwise(ps.Composite([a], [ps.exp(a), a * 3]), inplace_pattern={1: 0}).make_node(x)
    slab = slab_node(node)
    # output 0 into a fresh buffer (input 0), output 1 still into x (now input 1)
    assert slab.op.destroy_map == {0: [0], 1: [1]}
    assert slab.inputs[1] is x
