"""Unchanged legacy Theano/Lasagne scripts, via lasagne_bn_compat.install() and ``lasagne-bn run``.

tests/compat/scripts/legacy_mlp.py builds a batch-normalized MLP with
``theano`` / ``lasagne`` names, trains it (Adam, dropout, L2), predicts
deterministically, saves the weights the two ways Lasagne users did and
loads them back.  The same model built on lasagne_bn directly, from the same
seeds, must give the same numbers.  Everything runs in the default mode
(Numba), as the script does.
"""

from __future__ import annotations

import pickle
import runpy
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET, SCRIPTS, run_cli

import lasagne_bn_compat
import lasagne_bn_compat.io as cio
from lasagne_bn import init, nonlinearities, objectives, random, regularization, updates
from lasagne_bn.layers import (
    DenseLayer,
    DropoutLayer,
    InputLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
)

pytestmark = QUIET
STEPS = 5
SCRIPT = SCRIPTS / "legacy_mlp.py"


def native_mlp(steps=STEPS):
    """legacy_mlp.py written against lasagne_bn and PyTensor, line for line."""
    random.set_rng(np.random.RandomState(42))
    rng = np.random.RandomState(0)
    X = rng.randn(64, 20).astype(pytensor.config.floatX)
    y = rng.randint(0, 4, 64).astype("int32")
    input_var = pt.matrix("inputs")
    target_var = pt.ivector("targets")
    l_in = InputLayer((None, 20), input_var=input_var)
    h = batch_norm(DenseLayer(l_in, 16, nonlinearity=nonlinearities.rectify, name="hid"))
    h = DropoutLayer(h, p=0.25)
    network = DenseLayer(h, 4, nonlinearity=nonlinearities.softmax, name="out")
    prediction = get_output(network)
    loss = objectives.categorical_crossentropy(prediction, target_var).mean()
    loss += 1e-4 * regularization.regularize_network_params(network, regularization.l2)
    params = get_all_params(network, trainable=True)
    train_fn = pytensor.function(
        [input_var, target_var], loss, updates=updates.adam(loss, params, learning_rate=0.01)
    )
    test_prediction = get_output(network, deterministic=True)
    test_acc = pt.mean(
        pt.eq(pt.argmax(test_prediction, axis=1), target_var), dtype=pytensor.config.floatX
    )
    val_fn = pytensor.function([input_var, target_var], [test_prediction, test_acc])
    losses = []
    for i in range(steps):
        batch = slice((i * 16) % 64, (i * 16) % 64 + 16)
        losses.append(train_fn(X[batch], y[batch]))
    pred, acc = val_fn(X, y)
    return {"losses": np.array(losses), "pred": pred, "acc": acc, "network": network, "X": X}


@pytest.fixture(scope="module")
def native():
    return native_mlp()


@pytest.fixture(scope="module")
def via_install(tmp_path_factory):
    """legacy_mlp.py run in this process after lasagne_bn_compat.install()."""
    work = tmp_path_factory.mktemp("install")
    results = work / "results.npz"
    argv = sys.argv[:]
    lasagne_bn_compat.install(theano_flags="")
    try:
        sys.argv = [str(SCRIPT), str(results), str(work), str(STEPS)]
        runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        sys.argv = argv
        lasagne_bn_compat.uninstall()
    with np.load(results) as f:
        return dict(f), work


def test_install_matches_lasagne_bn(via_install, native):
    got, _ = via_install
    assert got["losses"].shape == (STEPS,)
    np.testing.assert_allclose(got["losses"], native["losses"], rtol=1e-12)
    np.testing.assert_allclose(got["pred"], native["pred"], rtol=1e-12, atol=1e-15)
    assert float(got["acc"]) == float(native["acc"])
    assert got["losses"][-1] < got["losses"][0]  # it trains
    np.testing.assert_array_equal(got["reloaded"], got["pred"])
    assert str(got["name"]) == "__main__"


def test_saved_weights_load_into_a_lasagne_bn_network(via_install, native):
    """The script's np.savez and pickle files, read by lasagne_bn_compat.io into lasagne_bn."""
    _, work = via_install
    network = native["network"]
    before = get_all_param_values(network)
    for name in ("model.npz", "model.pkl"):
        checkpoint = cio.load_params(network, work / name)
        assert checkpoint.format == {"model.npz": "npz", "model.pkl": "pickle"}[name]
        for p, v in zip(get_all_params(network), checkpoint.values, strict=True):
            np.testing.assert_array_equal(p.get_value(), v)
    # the native model, trained the same way, holds the same values
    for a, b in zip(before, get_all_param_values(network), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    with open(work / "model.pkl", "rb") as fh:
        assert len(pickle.load(fh)) == len(before)


@pytest.mark.slow
def test_lasagne_bn_run_matches(via_install, tmp_path):
    """``lasagne-bn run legacy_mlp.py ...`` in a fresh process (entry points as installed)."""
    got, _ = via_install
    results = tmp_path / "results.npz"
    proc = run_cli(["run", SCRIPT, results, tmp_path, STEPS], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"trained {STEPS} steps" in proc.stdout
    with np.load(results) as f:
        ran = dict(f)
    np.testing.assert_allclose(ran["losses"], got["losses"], rtol=1e-12)
    np.testing.assert_allclose(ran["pred"], got["pred"], rtol=1e-12, atol=1e-15)
    assert list(ran["argv"]) == [str(SCRIPT), str(results), str(tmp_path), str(STEPS)]
    assert str(ran["name"]) == "__main__"


def test_init_seed_reproducibility_is_shared():
    """Same seed, same initial weights, whichever names built the layer."""
    lasagne_bn_compat.install(theano_flags="")
    try:
        import lasagne

        lasagne.random.set_rng(np.random.RandomState(7))
        legacy_W = lasagne.layers.DenseLayer((None, 5), 3).W.get_value()
    finally:
        lasagne_bn_compat.uninstall()
    random.set_rng(np.random.RandomState(7))
    native_W = DenseLayer((None, 5), 3, W=init.GlorotUniform()).W.get_value()
    np.testing.assert_array_equal(legacy_W, native_W)
