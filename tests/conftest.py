"""Suite-wide rules: the two test tiers, and no test leaves PyTensor's default mode changed.

The tiers (README, "Tests"):

- the default tier, ``python -m pytest``: every module and public function, numerics
  in the modes that run different code (the default Numba mode, the C VM, JAX and the
  python linker over the NumPy ``perform``);
- the full tier, ``python -m pytest --full``: everything, adding the tests marked
  ``slow`` (cold-cache children, whole demos, long fuzzing, big graphs) and the modes
  that repeat a representative one.

Which modes repeat another: ``FAST_COMPILE`` runs the same NumPy ``perform`` as the
python linker, behind other rewrites, and mode ``C`` compiles the same C code as the
C VM (``CVM``).  A variant in one of those modes waits for the full tier when the
same test with the same other parameters runs in the mode it repeats; otherwise
(a case that only mode ``C`` runs, say) it stays in the default tier.

In the default tier a test that names no mode compiles in ``FAST_COMPILE``, and
``perform`` is the NumPy reference (``lasagne_bn.ops.compiled_perform.numpy_perform``)
for every test: tests whose subject is a layer's or a function's behaviour compile
nothing per graph, and the python-linker variants of the numerics tests check the
reference itself.  Most of a cold run was Numba compiling, per test, the graph as a
whole or each node's function for ``perform``.  The kernels' numerics are the tests
that name the Numba mode (``tests/compile_modes.py``; its ``DEFAULT_MODE`` is the
real default), ``perform``'s dispatch to them is checked once per Op
(``tests/ops/test_compiled_perform.py``, marked ``compiled_perform``), and a test
about the default mode itself is marked ``default_mode``; both marks keep PyTensor's
own set-up.  The full tier runs every test in PyTensor's default mode with the
compiled ``perform``.

The default tier compiles a debug build (Numba at ``NUMBA_OPT=1``, the C compiler
at ``-O0``: ``debug_build.py``); the full tier compiles the optimized build a user
gets, and alone runs the tests marked ``optimized_build``.
"""

from __future__ import annotations

import contextlib
import os

import pytest

# Nothing here imports PyTensor or Numba at module level: the default tier's
# debug build (debug_build.py) must set their flags first, in pytest_configure.

# What a test that names no mode compiles in, in the default tier.
_QUICK_MODE = "FAST_COMPILE"

# The parameter values that select a repeating mode, as the tests spell them
# (tests/compile_modes.py: MODE_NAMES strings, LAYER_MODES values and ids).
_REPEATED_MODES = {"fast_compile": ("py",), "FAST_COMPILE": ("py",), "c": ("cvm",), "C": ("CVM",)}
# The same variant in the mode it repeats, as ids spell it ("py" is the python
# linker; LAYER_MODES' ids are numba, fast_compile, py and jax).


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run the full tier: the tests marked slow and the repeated modes as well",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _BUILD
    import jax_cache

    if not config.getoption("--full"):
        import debug_build

        _BUILD = debug_build.use_debug_build()
    _BUILD += "; " + jax_cache.use_jax_cache()
    import compile_modes  # noqa: F401 - takes the real default mode before any test changes it

    if os.environ.get("LBN_COMPILE_LOG"):  # where a cold run's time goes (compile_log.py)
        import compile_log

        config.pluginmanager.register(compile_log, "lbn_compile_log")
        compile_log.start()


_BUILD = "optimized build"


def pytest_report_header(config: pytest.Config) -> str:
    return f"lasagne_bn tests: {_BUILD}"


def _twins(item: pytest.Item) -> list[tuple]:
    """Keys of the variants that ``item`` repeats in another mode (none: it repeats none)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    parts = callspec.id.split("-")
    twins = []
    for n, part in enumerate(parts):
        for twin in _REPEATED_MODES.get(part, ()):
            twin_id = "-".join([*parts[:n], twin, *parts[n + 1 :]])
            twins.append((item.path, item.originalname, twin_id))
    return twins


def _key(item: pytest.Item) -> tuple:
    callspec = getattr(item, "callspec", None)
    return (item.path, item.originalname, callspec.id if callspec else "")


def _full_only(item: pytest.Item) -> bool:
    """Whether ``item`` is marked for the full tier alone."""
    return any(item.get_closest_marker(m) is not None for m in ("slow", "optimized_build"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--full``: leave out slow tests, tests of the optimized build, and
    variants whose twin in the mode they repeat runs (a variant with no such twin
    stays)."""
    if config.getoption("--full"):
        return
    keys = {_key(item) for item in items if not _full_only(item)}
    kept, deselected = [], []
    for item in items:
        if _full_only(item) or any(twin in keys for twin in _twins(item)):
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _quick(request: pytest.FixtureRequest) -> bool:
    """Whether what ``request`` sets up runs in the default tier's quick mode and with
    the NumPy ``perform`` (module docstring)."""
    return (
        not request.config.getoption("--full")
        and request.node.get_closest_marker("default_mode") is None
        and request.node.get_closest_marker("compiled_perform") is None
    )


@contextlib.contextmanager
def _quick_setup(quick: bool):
    """The quick mode and the NumPy ``perform`` while the block runs, if ``quick``."""
    import pytensor

    from lasagne_bn.ops.compiled_perform import numpy_perform

    if not quick:
        yield
        return
    previous = pytensor.config.mode
    pytensor.config.mode = _QUICK_MODE
    try:
        with numpy_perform():
            yield
    finally:
        pytensor.config.mode = previous


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
    """Module- and session-scoped fixtures get the quick set-up too.

    They are set up before the function-scoped fixture below, so without this their
    shared graphs compiled in the real default mode.  For a module-scoped fixture
    ``request.node`` is the module, which carries a file's marks.
    """
    with _quick_setup(fixturedef.scope != "function" and _quick(request)):
        yield


@pytest.fixture(autouse=True)
def _default_mode_unchanged(request: pytest.FixtureRequest):
    """The default tier's quick set-up for a test (module docstring), and no test
    leaves the default mode changed."""
    # A ``compat.install(theano_flags="mode=...")`` outside ``change_flags`` once
    # ran every later default-mode test in FAST_COMPILE, silently.
    import pytensor

    previous = pytensor.config.mode
    with _quick_setup(_quick(request)):
        mode = pytensor.config.mode
        yield
        changed = pytensor.config.mode
    pytensor.config.mode = previous
    if changed != mode:
        pytest.fail(f"the test left pytensor.config.mode={changed!r} (was {mode!r})")
