"""The demo's data: scikit-learn's handwritten digits, which ship with it (no download)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Data:
    x_train: object
    y_train: object
    x_test: object
    y_test: object


def load_data(seed: int, limit: int | None) -> Data:
    """Digits as float32 ``(N, 1, 8, 8)`` in [0, 1]; a stratified 80/20 split.

    ``limit`` keeps that many of the 1797 images (stratified too), for quick runs.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int32)
    if limit is not None and limit < len(y):
        x, _, y, _ = train_test_split(x, y, train_size=limit, stratify=y, random_state=seed)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    return Data(x_train, y_train, x_test, y_test)
