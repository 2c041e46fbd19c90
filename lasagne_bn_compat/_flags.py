"""Theano flags that PyTensor reads only when it is imported.

``optimizer=None`` or ``base_compiledir=...`` in ``THEANO_FLAGS`` cannot be
set on ``pytensor.config`` once PyTensor is imported; :func:`lasagne_bn_compat.install`
passes them to the import instead, when it comes first.  This module must
not import PyTensor itself.
"""

from __future__ import annotations

import os

__all__ = ["IMPORT_TIME_OPTIONS", "import_pytensor_with"]

#: PyTensor options that cannot change once PyTensor is imported (3.0.x).
IMPORT_TIME_OPTIONS = frozenset(
    {
        "base_compiledir",
        "cmodule__age_thresh_use",
        "cmodule__preload_cache",
        "compile__timeout",
        "compile__wait",
        "compiledir",
        "compiledir_format",
        "optimizer",
        "optimizer_excluding",
        "optimizer_including",
        "optimizer_requiring",
        "scan__allow_output_prealloc",
        "tensor__cmp_sloppy",
        "warn__ignore_bug_before",
    }
)


def import_pytensor_with(flags: str) -> None:
    """Import PyTensor with the options it reads only at import (optimizer, base_compiledir).

    They go through ``PYTENSOR_FLAGS`` for the import alone; the variable is
    restored afterwards, so child processes see the user's environment.
    """
    early = []
    for item in flags.split(","):
        name, sep, value = item.strip().partition("=")
        if sep and name.strip().replace(".", "__") in IMPORT_TIME_OPTIONS:
            early.append(f"{name.strip().replace('.', '__')}={value.strip()}")
    if not early:
        return
    saved = os.environ.get("PYTENSOR_FLAGS")
    os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [saved, *early]))
    try:
        import pytensor  # noqa: F401
    finally:
        if saved is None:
            del os.environ["PYTENSOR_FLAGS"]
        else:
            os.environ["PYTENSOR_FLAGS"] = saved
