"""The mode legacy code gets when it names none: small graphs run, big ones compile.

Theano's default linker compiled each node's C code once and kept it in a
disk cache, so code that builds hundreds of small functions (Keras's backend,
symbolic debugging, tests, ``x.eval()``) paid little for each.  PyTensor's
default Numba mode compiles every new graph into one function: seconds for a
graph of a few nodes the first time, and a few tenths of a second to load
it again from Numba's cache.  A graph of :data:`SMALL_GRAPH_NODES` nodes or
fewer is cheaper to run than to compile, so :class:`GraphSizeMode` runs it
node by node with each Op's ``perform`` (PyTensor's VM with Python thunks):
nothing is compiled, and the default mode's rewrites run (the stabilizing
ones, and ours that put in the batch-norm and convolution Ops, whose
``perform`` calls the same kernels).  Bigger graphs, a network's training
step, compile as :func:`lasagne_bn.ops.numba.linker.big_graph_mode` does.

>>> import pytensor, pytensor.tensor as pt
>>> x = pt.vector("x")
>>> f = pytensor.function([x], pt.exp(x) + 1, mode=GraphSizeMode())
>>> type(f.maker.linker).__name__, float(f([0.0])[0])
('VMLinker', 2.0)
"""

from __future__ import annotations

import pytensor
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.rewriting.basic import GraphRewriter, dfs_rewriter, node_rewriter
from pytensor.link.basic import Linker
from pytensor.link.vm import VMLinker
from pytensor.tensor.rewriting.ofg import inline_ofg_node

from lasagne_bn.ops.numba.linker import NumbaNodeLinker

__all__ = ["SMALL_GRAPH_NODES", "GraphSizeMode", "use_by_default"]

#: Nodes (of the graph as given to ``pytensor.function``, updates included)
#: up to which :class:`GraphSizeMode` runs a graph uncompiled.  Keras's
#: backend functions and symbolic checks have tens; a network's training
#: step has hundreds.
SMALL_GRAPH_NODES = 100

# Late in the rewrites (before the in-place ones at 49.5): the stabilizing
# and specializing rewrites have seen the inner graphs' Ops first.
_INLINE_POSITION = 48.0

# Set on the graph by the rewriter, read by the linker.
_SMALL = "_lasagne_bn_small_graph"


@node_rewriter([OpFromGraph])
def _inline_inner_graphs(fgraph, node):
    """An ``OpFromGraph`` (PyTensor's ``Softmax`` is one) replaced by its inner graph.

    Its ``perform`` would compile the inner graph in the default Numba mode,
    which is what running uncompiled avoids.
    """
    return inline_ofg_node(node)


class _BySize(GraphRewriter):
    """The small graphs' rewrites or the big graphs' ones, by the graph's size."""

    def __init__(self, small: GraphRewriter, big: GraphRewriter, limit: int):
        self.small, self.big, self.limit = small, big, limit

    def apply(self, fgraph):
        small = len(fgraph.apply_nodes) <= self.limit
        setattr(fgraph, _SMALL, small)
        return (self.small if small else self.big).rewrite(fgraph)


class _BySizeLinker(Linker):
    """PyTensor's VM with Python thunks for a small graph, :class:`NumbaNodeLinker` else.

    ``accept`` returns the chosen linker, so the function holds a plain one.
    """

    def accept(self, fgraph, no_recycling=None, profile=None):
        if getattr(fgraph, _SMALL, False):
            chosen = VMLinker(allow_gc=self.allow_gc, c_thunks=False, use_cloop=False)
            # PyTensor's FunctionMaker tells a VMLinker the updates only if the
            # linker it *accepted from* has this method; it then calls the one
            # ``accept`` returned (a fresh copy of this linker gets it).
            self.accept_var_updates = chosen.accept_var_updates
        else:
            chosen = NumbaNodeLinker(allow_gc=self.allow_gc)
        return chosen.accept(fgraph, no_recycling=no_recycling, profile=profile)

    def make_thunk(self, **kwargs):
        raise RuntimeError("_BySizeLinker.accept returns the linker that makes the thunk")


class GraphSizeMode(Mode):
    """The default mode's rewrites; a graph of at most ``limit`` nodes runs uncompiled.

    Big graphs get the rewrites of
    :class:`~lasagne_bn.ops.numba.linker.NumbaNodeLinker`, their linker.
    Small graphs get the default mode's rewrites but the Numba-only and
    C-only ones; they skip elementwise fusion (a fused ``Composite`` has
    no NumPy ``perform`` and would run element by element in Python) and the
    elementwise in-place rewrite (it saves memory, not time, and is the
    slowest rewrite of a small graph), and have their ``OpFromGraph``
    nodes inlined.

    Parameters
    ----------
    linker
        Ignored (``Mode.clone`` passes one); the linker is chosen per graph.
    optimizer
        The rewrites; ``None``: the default mode's.
    limit : int
        The most nodes a graph runs uncompiled with.
    """

    def __init__(self, linker=None, optimizer=None, limit: int = SMALL_GRAPH_NODES):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise TypeError(f"GraphSizeMode: limit={limit!r} must be an int >= 0")
        if optimizer is None:
            optimizer = get_default_mode().provided_optimizer
        self.limit = limit
        super().__init__(linker=_BySizeLinker(), optimizer=optimizer)

    def clone(self, link_kwargs=None, optimizer="", **kwargs) -> GraphSizeMode:
        if optimizer == "":
            optimizer = self.provided_optimizer
        return type(self)(optimizer=optimizer, limit=self.limit)

    @property
    def optimizer(self):
        query = self._optimizer
        if not hasattr(query, "excluding"):  # a rewriter given as is
            return query
        big = query.including(*NumbaNodeLinker.required_rewrites).excluding(
            *NumbaNodeLinker.incompatible_rewrites
        )
        # Not the Numba-only rewrites (they wrap random variables in inner
        # graphs for Numba), nor the C-only ones (BLAS calls, whose check
        # compiles a test program to find a BLAS): NumPy's dot runs as it is.
        small = (
            query.including(*VMLinker.required_rewrites)
            .excluding(*NumbaNodeLinker.incompatible_rewrites)
            .excluding("fusion", "inplace_elemwise_optimizer")
            .register((dfs_rewriter(_inline_inner_graphs), _INLINE_POSITION))
        )
        return _BySize(self.optdb.query(small), self.optdb.query(big), self.limit)


def use_by_default() -> object:
    """Make :class:`GraphSizeMode` the default mode of ``pytensor.function`` (and ``.eval()``).

    A process-wide choice (it sets ``pytensor.config.mode``), made only when
    called (``lasagne-bn run`` calls it while the script runs).  Returns the
    mode that was the default, to restore it with
    ``pytensor.config.mode = previous``.
    """
    previous = pytensor.config.mode
    pytensor.config.mode = GraphSizeMode()
    return previous
