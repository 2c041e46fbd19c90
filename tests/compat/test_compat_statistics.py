"""Batch-norm statistics are checked on every load, and files say which statistic they hold."""

from __future__ import annotations

import io

import numpy as np
import pytest
from legacy_helpers import QUIET
from test_compat_cli import lasagne_bn_cmd  # noqa: F401  (fixture)
from test_compat_io import Net, mlp_values, npz_bytes

import lasagne_bn_compat.io as cio

pytestmark = QUIET
STAT = 4  # fc_bn's inv_std / var in the MLP's parameter list


@pytest.fixture(scope="module")
def net():
    return Net()


@pytest.fixture(scope="module")
def var_net():
    return Net(stat_storage="var")


@pytest.mark.parametrize("storage", ["inv_std", "var"])
@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_impossible_statistics_are_refused_without_conversion(net, var_net, storage, bad):
    """Loading inv_std into an inv_std network (nothing to convert) still checks the values."""
    target = net if storage == "inv_std" else var_net
    values = mlp_values(1, "float64")
    values[STAT] = values[STAT].copy()
    values[STAT][1] = bad
    before = target.snapshot()
    with pytest.raises(ValueError, match=rf"value {STAT} \(fc_bn.{storage}\): {storage} holds 1"):
        cio.load_params(target.out, io.BytesIO(npz_bytes(values)), stat_storage=storage)
    assert target.unchanged_since(before)


def test_zero_inv_std_is_refused_but_zero_var_loads(net, var_net):
    values = mlp_values(1, "float64")
    values[STAT] = np.zeros_like(values[STAT])
    with pytest.raises(ValueError, match="inv_std holds 5 value"):
        cio.load_params(net.out, io.BytesIO(npz_bytes(values)))
    cio.load_params(var_net.out, io.BytesIO(npz_bytes(values)), stat_storage="var")
    np.testing.assert_array_equal(var_net.params[STAT].get_value(), 0.0)


def test_inv_std_above_one_over_sqrt_epsilon_is_refused_when_converting(var_net):
    values = mlp_values(1, "float64")
    values[STAT] = np.full(5, 2.0 / np.sqrt(1e-4))  # twice what any variance gives
    before = var_net.snapshot()
    with pytest.raises(ValueError, match="above 1/sqrt\\(epsilon\\) = 100"):
        cio.load_params(var_net.out, io.BytesIO(npz_bytes(values)))
    assert var_net.unchanged_since(before)
    values[STAT] = np.full(5, (1 + 1e-7) / np.sqrt(1e-4))  # rounding: variance 0
    cio.load_params(var_net.out, io.BytesIO(npz_bytes(values)))
    np.testing.assert_array_equal(var_net.params[STAT].get_value(), 0.0)


@pytest.mark.parametrize("fmt", cio.WRITE_FORMATS)
def test_var_files_record_it_and_load_right_by_default(fmt, net, var_net, tmp_path):
    values = mlp_values(2, "float64")
    cio.load_params(net.out, io.BytesIO(npz_bytes(values)))
    path = tmp_path / f"w.{fmt}"
    cio.save_params(net.out, path, fmt, stat_storage="var")
    checkpoint = cio.read_checkpoint(path)
    assert (checkpoint.stat_storage, checkpoint.stat_indices) == ("var", [STAT])
    assert len(checkpoint.values) == len(values) and not checkpoint.extras
    # into an inv_std network with no stat_storage argument: converted back
    cio.load_params(net.out, path)
    np.testing.assert_allclose(net.params[STAT].get_value(), values[STAT], rtol=1e-12)
    cio.load_params(var_net.out, path)
    np.testing.assert_allclose(
        var_net.params[STAT].get_value(), 1 / values[STAT] ** 2 - 1e-4, rtol=1e-12
    )
    before = net.snapshot()
    with pytest.raises(ValueError, match="records that its batch-norm statistics are var"):
        cio.load_params(net.out, path, stat_storage="inv_std")
    assert net.unchanged_since(before)


def test_inv_std_files_stay_lasagnes_own(net, tmp_path):
    """No record in inv_std files: Lasagne's np.load idiom reads exactly the arrays."""
    path = tmp_path / "w.npz"
    cio.save_params(net.out, path)
    with np.load(path) as f:
        assert sorted(f.files) == [f"arr_{i}" for i in range(7)]
    assert cio.read_checkpoint(path).stat_storage is None


def test_record_of_another_architecture_is_refused(net, tmp_path):
    path = tmp_path / "w.npz"
    values = mlp_values(3, "float64")
    cio.write_values(path, values, var_indices=[2])  # not where this network's statistic is
    with pytest.raises(ValueError, match=r"statistics at arrays \[2\], but the network's are"):
        cio.load_params(net.out, path)


def test_corrupt_record_is_a_format_error(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, np.ones(2), __lasagne_bn_statistics__=np.array("{not json"))
    with pytest.raises(cio.LegacyFormatError, match="record is corrupt"):
        cio.read_checkpoint(path)


def test_convert_twice_is_refused(lasagne_bn_cmd, net, tmp_path):  # noqa: F811
    src = tmp_path / "legacy.npz"
    cio.save_params(net.out, src)  # a Lasagne (inv_std) file
    once = tmp_path / "var.npz"
    status, out, err = lasagne_bn_cmd("convert", src, once, "--to", "var", "--stats", STAT)
    assert status == 0, err
    assert cio.read_checkpoint(once).stat_storage == "var"
    status, _, err = lasagne_bn_cmd("convert", once, tmp_path / "x.npz", "--to", "var")
    assert status == 2 and "already var: converting them again would break them" in err
    status, _, err = lasagne_bn_cmd(
        "convert", once, tmp_path / "x.npz", "--to", "inv_std", "--from", "inv_std"
    )
    assert status == 2 and "records that its statistics are var" in err
    back = tmp_path / "back.npz"
    status, out, err = lasagne_bn_cmd("convert", once, back, "--to", "inv_std")
    assert status == 0, err
    np.testing.assert_allclose(
        cio.read_checkpoint(back).values[STAT], cio.read_checkpoint(src).values[STAT], rtol=1e-12
    )
    assert cio.read_checkpoint(back).stat_storage is None


def _biased(mean, first_weight=True):
    """W, b, beta, gamma, mean, inv_std, W2: a dense layer that kept its bias, then batch norm."""
    r = np.random.RandomState(0)
    values = [
        r.randn(4, 5),
        r.randn(5),
        r.randn(5),
        np.abs(r.randn(5)),
        mean,
        np.abs(r.randn(5)) + 0.1,
        r.randn(5, 2),
    ]
    return values if first_weight else values[1:]


BN = ["bn beta", "bn gamma", "bn mean", "bn inv_std or var"]


def test_guess_tells_a_bias_kept_before_a_batch_norm_by_layer_order(lasagne_bn_cmd, tmp_path):  # noqa: F811
    """Five arrays of one shape after a weight: the bias comes right after its weight.

    The other reading (a batch norm, then a parameter-only layer such as a
    PReLU's alpha) would put the statistic fourth: a mean of both signs
    cannot be one.
    """
    values = _biased(np.array([0.3, -1.2, 0.5, -0.1, 2.0]))
    path = tmp_path / "biased.npz"
    np.savez(path, *values)
    assert cio.guess_bn_roles(values) == [None, "bias", *BN, None]
    status, out, _ = lasagne_bn_cmd("inspect", path)
    assert status == 0 and "one shape in a row" not in out
    assert "1 batch-norm layer(s): their statistics are arrays 5" in out
    status, out, err = lasagne_bn_cmd(
        "convert", path, tmp_path / "o.npz", "--to", "var", "--guess"
    )
    assert status == 0, err
    assert "arrays 5 converted inv_std -> var" in out


def test_guess_declines_where_layer_order_does_not_tell(lasagne_bn_cmd, tmp_path):  # noqa: F811
    # a mean > 0 everywhere fits both readings; with no weight before the
    # run, nothing says where the layer starts
    for values in (_biased(np.abs(np.arange(5.0)) + 1), _biased(np.zeros(5) - 1, False)):
        roles = cio.guess_bn_roles(values)
        start = 1 if len(values) == 7 else 0
        assert roles[start : start + 5] == [cio.AMBIGUOUS] * 5, roles
        path = tmp_path / "biased.npz"
        np.savez(path, *values)
        status, out, _ = lasagne_bn_cmd("inspect", path)
        assert status == 0 and "one shape in a row" in out
        status, _, err = lasagne_bn_cmd(
            "convert", path, tmp_path / "o.npz", "--to", "var", "--guess"
        )
        assert status == 2 and "--guess would be a guess" in err and "--network" in err
        assert not (tmp_path / "o.npz").exists()
