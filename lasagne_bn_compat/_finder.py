"""The import hook behind :func:`lasagne_bn_compat.install`: ``theano.*``, ``lasagne.*``.

A legacy module name resolves, in this order, to

1. an explanation, if it is in :data:`GONE` (or below an entry there): the
   import fails with an ``ImportError`` that says what to use instead;
2. a shim module of this package (``theano.tensor`` ->
   ``lasagne_bn_compat.theano.tensor``), if one exists;
3. the module named in :data:`ALIASES` (``theano.scan_module`` ->
   ``pytensor.scan``, ``lasagne.init`` -> ``lasagne_bn.init``);
4. the module of the same path in PyTensor (``theano.x.y`` ->
   ``pytensor.x.y``) or lasagne_bn (``lasagne.x`` -> ``lasagne_bn.x``), if
   one exists: PyTensor kept most of Theano's layout;
5. otherwise a ``ModuleNotFoundError`` that points to the guide.

The legacy name is bound to the *same module object* as its target (no
copies), so ``lasagne.layers.DenseLayer is lasagne_bn.layers.DenseLayer``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

from lasagne_bn_compat._names import GUIDE

__all__ = ["ALIASES", "GONE", "LegacyFinder", "resolve"]

ROOTS = ("theano", "lasagne")

_USE_JAX = (
    "PyTensor has no CUDA/cuDNN/gpuarray backend; to run on a GPU, compile with "
    "mode='JAX' on a JAX install with GPU support"
)

#: Legacy modules (and everything below them) that have no counterpart.
GONE = {
    "theano.sandbox.cuda": _USE_JAX,
    "theano.sandbox.gpuarray": _USE_JAX,
    "theano.misc.pycuda_init": _USE_JAX,
    "theano.misc.pycuda_utils": _USE_JAX,
    "theano.sandbox.cuda.dnn": _USE_JAX,
    "theano.tensor.nnet.corr": "CorrMM is gone; use theano.tensor.nnet.conv2d",
    "theano.tensor.nnet.corr3d": "Corr3dMM is gone",
    "theano.tensor.nnet.blocksparse": "block-sparse ops are gone",
    "theano.d3viz": "use pytensor.printing.debugprint (theano.printing.debugprint)",
    "theano.sandbox.linalg": "use theano.tensor.nlinalg / slinalg (pytensor.tensor.*)",
}

#: Legacy module -> the module it is (where the same path does not exist).
ALIASES = {
    "theano.gof": "pytensor.graph",
    "theano.gof.graph": "pytensor.graph.basic",
    "theano.gof.op": "pytensor.graph.op",
    "theano.gof.type": "pytensor.graph.type",
    "theano.gof.fg": "pytensor.graph.fg",
    "theano.gof.opt": "pytensor.graph.rewriting.basic",
    "theano.gof.utils": "pytensor.graph.utils",
    "theano.gof.link": "pytensor.link.basic",
    "theano.scan_module": "pytensor.scan",
    "theano.scan_module.scan_utils": "pytensor.scan.utils",
    "theano.tensor.basic": "lasagne_bn_compat.theano.tensor",
    "theano.tensor.var": "pytensor.tensor.variable",
    "theano.tensor.opt": "pytensor.tensor.rewriting.basic",
    "theano.tensor.nnet.nnet": "lasagne_bn_compat.theano.tensor.nnet",
    "theano.tensor.nnet.sigm": "lasagne_bn_compat.theano.tensor.nnet",
    "theano.compile.function_module": "pytensor.compile.maker",
    "theano.compile.debugmode": "pytensor.compile.debug.debugmode",
    "theano.compile.nanguardmode": "pytensor.compile.debug.nanguardmode",
    "theano.compile.profiling": "pytensor.compile.debug.profiling",
    "theano.compile.monitormode": "pytensor.compile.debug.monitormode",
    "theano.scan_module.scan_op": "pytensor.scan.op",
    "theano.scan_module.scan": "pytensor.scan.basic",
    "theano.scan_module.scan_opt": "pytensor.scan.rewriting",
    "lasagne.init": "lasagne_bn.init",
    "lasagne.nonlinearities": "lasagne_bn.nonlinearities",
    "lasagne.objectives": "lasagne_bn.objectives",
    "lasagne.regularization": "lasagne_bn.regularization",
    "lasagne.updates": "lasagne_bn.updates",
    "lasagne.random": "lasagne_bn.random",
}

_FALLBACK_ROOT = {"theano": "pytensor", "lasagne": "lasagne_bn"}


def _gone(fullname: str) -> str | None:
    parts = fullname.split(".")
    for i in range(len(parts), 0, -1):
        advice = GONE.get(".".join(parts[:i]))
        if advice is not None:
            return advice
    return None


def _exists(module_name: str) -> bool:
    if module_name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        return False


def _refuse_cudnn_as_theano_did(fullname: str) -> None:
    from lasagne_bn_compat.theano._config import cudnn_refusal

    reason = cudnn_refusal()
    if reason is not None:
        raise ImportError(
            f"{fullname} requires GPU support and Theano's flags say {reason} (as in "
            "Theano; without that flag the cuDNN layers run on lasagne_bn's ops)",
            name=fullname,
        )


def resolve(fullname: str) -> str:
    """The module that the legacy module ``fullname`` stands for.

    Raises
    ------
    ImportError
        If the module has no counterpart (the message says what to use), or
        is unknown (``ModuleNotFoundError``).
    """
    advice = _gone(fullname)
    if advice is not None:
        raise ImportError(
            f"{fullname} has no counterpart on PyTensor 3 / lasagne_bn: {advice} ({GUIDE})",
            name=fullname,
        )
    if fullname == "lasagne.layers.dnn":
        _refuse_cudnn_as_theano_did(fullname)
    shim = "lasagne_bn_compat." + fullname
    if _exists(shim):
        return shim
    if fullname in ALIASES:
        return ALIASES[fullname]
    root, _, rest = fullname.partition(".")
    if rest:
        same_path = f"{_FALLBACK_ROOT[root]}.{rest}"
        if _exists(same_path):
            return same_path
    raise ModuleNotFoundError(
        f"No module named {fullname!r}: lasagne_bn's compatibility layer has no counterpart "
        f"for it ({GUIDE} for the modules it maps)",
        name=fullname,
    )


class _AliasLoader(importlib.abc.Loader):
    """Binds a legacy name to an already importable module object."""

    def __init__(self, target: str):
        self.target = target
        self._saved_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        # The import system sets __spec__ on whatever create_module returns;
        # keep the real module's own spec (restored in exec_module).
        self._saved_spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module):
        if self._saved_spec is not None:
            module.__spec__ = self._saved_spec


class LegacyFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that answers for ``theano``, ``lasagne`` and their submodules.

    ``bound_names`` collects the legacy names it binds, so that
    :func:`lasagne_bn_compat.uninstall` can remove them from ``sys.modules``.
    """

    def __init__(self):
        self.bound_names: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in ROOTS:
            return None
        module_name = resolve(fullname)
        self.bound_names.add(fullname)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module_name))
