"""Generate tests/data/guide_oracle_digits_mlp.npz: the guide's legacy script on real Theano.

migration_guide.md's worked example (train_digits_legacy.py) is run
unchanged on Theano 1.0.5 + Lasagne master (float64, CPU); the weights it
saves are the reference the project's run of the same script must match.
Not run by the tests.  Two steps, per /work/shared/LEGACY_ORACLE.md:

1. with the project's Python (which has scikit-learn), export the digits:
       python tests/data/make_guide_oracle.py export <scratch>/digits.npz
2. with the legacy Python (no scikit-learn there: a stub module serves the
   exported digits to the unchanged script):
       PYTHONPATH=<Lasagne master checkout> \\
       THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=<scratch> \\
       <legacy venv>/bin/python tests/data/make_guide_oracle.py run <scratch>/digits.npz \\
           tests/data/guide_oracle_digits_mlp.npz
"""

import os
import shutil
import subprocess
import sys
import tempfile

from guide_scripts import guide_script  # next to this file

STUB = """\
import numpy as np


class _Bunch(dict):
    __getattr__ = dict.__getitem__


def load_digits():
    with np.load(%r) as f:
        return _Bunch(data=f["data"], target=f["target"])
"""


def legacy_script() -> str:
    return guide_script("train_digits_legacy.py")


def main():
    if sys.argv[1] == "export":
        import numpy as np
        from sklearn.datasets import load_digits

        digits = load_digits()
        np.savez(sys.argv[2], data=digits.data, target=digits.target)
        return
    digits, out = os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    work = tempfile.mkdtemp()
    os.makedirs(os.path.join(work, "sklearn"))
    open(os.path.join(work, "sklearn", "__init__.py"), "w").close()
    with open(os.path.join(work, "sklearn", "datasets.py"), "w") as f:
        f.write(STUB % digits)
    with open(os.path.join(work, "train_digits_legacy.py"), "w") as f:
        f.write(legacy_script())
    env = dict(os.environ, PYTHONPATH=work + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "train_digits_legacy.py"], cwd=work, env=env, check=True)
    shutil.copy(os.path.join(work, "digits_mlp.npz"), out)


if __name__ == "__main__":
    main()
