"""Generate the oracle of the migration guide's nolearn example, on real Theano.

Writes ``nolearn_digits_oracle.npz`` next to this file: what
migration_guide.md's ``nolearn_digits.py`` (extracted from the guide, run
unchanged) saves on Theano 1.0.5, Lasagne master and nolearn 0.6.1 (float32,
CPU): every parameter and running average after three epochs on the first
600 of scikit-learn's digits (``arr_0`` ...), the per-epoch training loss,
validation loss and accuracy (``history``) and the predicted probabilities
(``proba``).

Not run by the tests.  With the legacy Python of /work/shared/LEGACY_ORACLE.md,
scikit-learn, and nolearn 0.6.1 and tabulate installed into a folder
(``pip install --no-deps --target <deps> nolearn==0.6.1 tabulate``)::

    PYTHONPATH=<deps>:<Lasagne master checkout> \\
    THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,base_compiledir=<scratch> \\
        <legacy venv>/bin/python tests/data/make_nolearn_oracle.py
"""

import os
import shutil
import subprocess
import sys
import tempfile

from guide_scripts import guide_script  # noqa: E402  (next to this file)

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    folder = tempfile.mkdtemp()
    try:
        with open(os.path.join(folder, "nolearn_digits.py"), "w") as f:
            f.write(guide_script("nolearn_digits.py"))
        subprocess.check_call([sys.executable, "nolearn_digits.py"], cwd=folder)
        shutil.copy(
            os.path.join(folder, "nolearn_digits.npz"),
            os.path.join(HERE, "nolearn_digits_oracle.npz"),
        )
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
