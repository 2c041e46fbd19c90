"""The ``bilinear_upsampling`` cases of bilinear_oracle.npz: one list for the oracle
script (make_bilinear_oracle.py, on Theano 1.0.5) and the test that reads it."""

#: name -> bilinear_upsampling keyword arguments
CASES = {
    "r2_1d": dict(ratio=2),
    "r3_1d": dict(ratio=3),
    "r2_2d": dict(ratio=2, use_1D_kernel=False),
    "r3_2d": dict(ratio=3, use_1D_kernel=False),
    "r2_1d_sizes": dict(ratio=2, batch_size=2, num_input_channels=3),
    "frac_3_2": dict(frac_ratio=(3, 2), use_1D_kernel=False),
    "frac_mixed": dict(frac_ratio=((2, 1), (5, 2)), use_1D_kernel=False),
    "frac_reduced": dict(frac_ratio=(4, 2), use_1D_kernel=False),
}
