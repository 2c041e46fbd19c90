"""The convolution kernels' GEMM engine on plain matrices, at every panel width.

The result columns come in panels of ``NR`` (two SIMD vectors); a last
panel at most half full runs the narrow micro-kernel.  These products have
full panels, a half-full last panel and a more than half-full one, with a
row count that is not a multiple of ``MR`` and a reduction longer than
``KC``; the reference is NumPy's float64 product.
"""

from __future__ import annotations

import numpy as np
import pytest

from lasagne_bn.ops.numba import conv_kernels as kernels


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` through ``kernels.gemm``, ``b``'s rows padded as the engine reads them."""
    m, k = a.shape
    n = b.shape[1]
    nr = kernels.panel_width(a)
    ldb = n + nr
    bp = np.zeros((k, ldb), dtype=a.dtype)
    bp[:, :n] = b
    dst = np.full(m * n, np.nan, dtype=a.dtype)
    panel = np.empty(0, dtype=a.dtype)
    kernels.gemm(
        m, n, k, a.reshape(-1), 0, kernels.row_table(m, k), bp.reshape(-1), 0,
        np.arange(k) * ldb, dst, 0, n, n, n, panel,
    )  # fmt: skip
    return dst.reshape(m, n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("panels", [0.25, 0.5, 0.75, 1.0, 1.5, 2.5])
def test_gemm_matches_numpy(dtype, panels):
    nr = kernels.panel_width(np.empty(0, dtype))
    n = max(1, int(panels * nr))
    m, k = 3 * kernels.MR + 5, kernels.KC + 37
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(_product(a, b), expected, rtol=0, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_narrow_and_full_panels_give_the_same_bits(dtype):
    """A column computed in a narrow panel equals the same column in a full one."""
    nr = kernels.panel_width(np.empty(0, dtype))
    m, k = 2 * kernels.MR + 3, 2 * kernels.KC + 1
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, 2 * nr)).astype(dtype)
    full = _product(a, b)  # two full panels
    narrow = _product(a, b[:, : nr // 2])  # one panel, half full
    np.testing.assert_array_equal(narrow, full[:, : nr // 2])


def _tiles_product(a: np.ndarray, bs: list[np.ndarray]) -> np.ndarray:
    """``sum_i a_i @ b_i`` through ``kernels.gemm_tiles`` (one call per term) and ``tile_rows``."""
    m, k = a.shape[1:]
    n = bs[0].shape[1]
    nr = kernels.panel_width(a)
    ldb = n + nr
    tiles = np.full(kernels.padded_rows(m) * -(-n // nr) * nr, np.nan, dtype=a.dtype)
    for i, b in enumerate(bs):
        bp = np.zeros((k, ldb), dtype=a.dtype)
        bp[:, :n] = b
        kernels.gemm_tiles(
            m, n, k, a[i].reshape(-1), 0, kernels.row_table(m, k), bp.reshape(-1), 0,
            np.arange(k) * ldb, tiles, i > 0,
        )  # fmt: skip
    out = np.full(m * n, np.nan, dtype=a.dtype)
    kernels.tile_rows(tiles, m, n, out, 0, n)
    return out.reshape(m, n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("panels", [0.5, 1.0, 1.5, 2.5])
def test_tile_accumulation_matches_numpy(dtype, panels):
    """Products summed in the tile layout (the filter gradient's sum over images)."""
    nr = kernels.panel_width(np.empty(0, dtype))
    n = max(1, int(panels * nr))
    m, k, terms = 2 * kernels.MR + 3, kernels.KC + 11, 3
    rng = np.random.default_rng(n + 1)
    a = rng.standard_normal((terms, m, k)).astype(dtype)
    bs = [rng.standard_normal((k, n)).astype(dtype) for _ in range(terms)]
    expected = sum(a[i].astype(np.float64) @ bs[i].astype(np.float64) for i in range(terms))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(
        _tiles_product(a, bs), expected, rtol=0, atol=tol * np.sqrt(terms * k)
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 33, 100])
def test_copy_and_zero_runs_touch_only_their_run(dtype, n):
    src = np.arange(1, 200, dtype=dtype)
    dst = np.full(150, -1.0, dtype=dtype)
    kernels.copy_run(dst, 7, src, 3, n)
    expected = np.full(150, -1.0, dtype=dtype)
    expected[7 : 7 + n] = src[3 : 3 + n]
    np.testing.assert_array_equal(dst, expected)
    kernels.zero_run(dst, 20, n)
    expected[20 : 20 + n] = 0
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize(
    ("rows", "width", "top", "left"),
    [
        (7, 9, 1, 1),  # a 5x7 plane inside a border of one
        (9, 11, 2, 3),  # wider on one side
        (5, 7, 0, 0),  # no border: a copy
        (4, 6, -1, -1),  # negative offsets crop the source (padding beyond the taps)
        (3, 4, -1, -2),  # cropped on every side
        (5, 7, 9, 0),  # the plane lands below the buffer: all zeros
    ],
)
def test_pad_into_matches_numpy(rows, width, top, left):
    rng = np.random.default_rng(1)
    C, R, S = 3, 5, 7
    src = rng.random((2, C, R, S), dtype="float32")  # the second image's planes are copied
    ld = rows * width + 5  # a tail past each plane, zeroed too
    dst = np.full(4 + C * ld, np.nan, dtype="float32")
    kernels.pad_into(src.reshape(-1), C * R * S, C, R, S, dst, 4, ld, rows, width, top, left)
    expected = np.zeros((C, ld), dtype="float32")
    planes = expected[:, : rows * width].reshape(C, rows, width)
    for r in range(R):
        for s in range(S):
            if 0 <= r + top < rows and 0 <= s + left < width:
                planes[:, r + top, s + left] = src[1, :, r, s]
    assert np.isnan(dst[:4]).all()
    np.testing.assert_array_equal(dst[4:].reshape(C, ld), expected)
