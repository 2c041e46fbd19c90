"""Generate the Keras 2 files of the migration guide's Keras example, on real Theano.

Writes, next to this file:

- ``keras_bn.h5``: a small batch-normed CNN (a convolution and a dense layer,
  each followed by ``BatchNormalization``) that Keras 2.2.4 built, trained
  three SGD steps on the batch below and saved, with Theano 1.0.5 as its
  backend (float32, CPU);
- ``keras_batch.npz``: that batch (``x``: 16 x 6 x 6 x 1, ``y`` one-hot);
- ``keras_step_oracle.npz``: what migration_guide.md's ``keras_step.py``
  (extracted from the guide, run unchanged on the same stack) saves: the
  predictions before and after one training step, its loss, and every weight
  and running average after it.

Not run by the tests.  With the legacy Python of /work/shared/LEGACY_ORACLE.md,
Keras 2.2.4 and h5py installed into it (pip), Python 3.10 or later::

    KERAS_BACKEND=theano PYTHONPATH=<Lasagne master checkout> \\
    THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,base_compiledir=<scratch> \\
        <legacy venv>/bin/python tests/data/make_keras_oracle.py
"""

import collections
import collections.abc
import os
import shutil
import subprocess
import sys
import tempfile

# Python 3.10 removed these aliases; Keras 2.2.4 imports them from collections.
for _name in ("Iterable", "Mapping", "MutableMapping", "Sequence", "Callable"):
    setattr(collections, _name, getattr(collections.abc, _name))

import numpy as np  # noqa: E402
from guide_scripts import guide_script  # noqa: E402  (next to this file)

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(h5_path, batch_path):
    from keras.layers import Activation, BatchNormalization, Conv2D, Dense, Flatten
    from keras.models import Sequential
    from keras.optimizers import SGD

    np.random.seed(0)  # noqa: NPY002  (Keras draws its initial weights from it)
    model = Sequential(
        [
            Conv2D(4, (3, 3), input_shape=(6, 6, 1), name="conv"),
            BatchNormalization(name="conv_bn"),
            Activation("relu"),
            Flatten(),
            Dense(8, name="dense"),
            BatchNormalization(name="dense_bn"),
            Activation("relu"),
            Dense(3, activation="softmax", name="out"),
        ]
    )
    model.compile(SGD(lr=0.1), "categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.RandomState(1)
    x = rng.standard_normal((16, 6, 6, 1)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.randint(0, 3, 16)]
    for _ in range(3):  # running averages away from their initial values
        model.train_on_batch(x, y)
    model.save(h5_path)
    np.savez(batch_path, x=x, y=y)


def main():
    h5_path = os.path.join(HERE, "keras_bn.h5")
    batch_path = os.path.join(HERE, "keras_batch.npz")
    make_model(h5_path, batch_path)
    folder = tempfile.mkdtemp()
    try:
        shutil.copy(h5_path, folder)
        shutil.copy(batch_path, folder)
        with open(os.path.join(folder, "keras_step.py"), "w") as f:
            f.write(guide_script("keras_step.py"))
        subprocess.check_call([sys.executable, "keras_step.py"], cwd=folder)
        shutil.copy(
            os.path.join(folder, "keras_step.npz"), os.path.join(HERE, "keras_step_oracle.npz")
        )
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
