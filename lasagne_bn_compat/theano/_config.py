"""``theano.config`` on top of ``pytensor.config``, and ``THEANO_FLAGS``.

Reading or setting an option that PyTensor has goes to ``pytensor.config``
(Theano's dotted sections become PyTensor's double underscores:
``config.gcc.cxxflags`` is ``pytensor.config.gcc__cxxflags``).  Options only
Theano had (``device``, ``lib.cnmem``, ``dnn.enabled``, ...) read as the
CPU-only values that describe PyTensor (``device == 'cpu'``), and setting
them warns once and changes nothing.
"""

from __future__ import annotations

import warnings

import pytensor

from lasagne_bn_compat._flags import IMPORT_TIME_OPTIONS

__all__ = ["TheanoConfig", "apply_theano_flags", "config", "cudnn_refusal"]

_NO_GPU = (
    "PyTensor has no CUDA/gpuarray backend; to run on a GPU, compile with mode='JAX' "
    "on a JAX install with GPU support"
)

#: Options only Theano had, with the values that describe PyTensor.
THEANO_ONLY = {
    "device": "cpu",
    "init_gpu_device": "",
    "force_device": False,
    "contexts": "",
    "print_active_device": False,
    "enable_initial_driver_test": False,
    "experimental__unpickle_gpu_on_cpu": True,
    "lib__cnmem": 0.0,
    "dnn__enabled": "False",
    "dnn__conv__algo_fwd": "small",
    "dnn__conv__algo_bwd_data": "none",
    "dnn__conv__algo_bwd_filter": "none",
    "gpuarray__preallocate": 0.0,
    "gpuarray__single_stream": True,
    "cuda__root": "",
    "nvcc__fastmath": False,
    "nvcc__flags": "",
    "pycuda__init": False,
    "magma__enabled": False,
    "int_division": "floatX",
    "deterministic": "default",
    "compute_test_value": "off",
}


def _known() -> dict:
    return getattr(pytensor.config, "_config_var_dict", {})


def _has_section(key: str) -> bool:
    prefix = key + "__"
    return any(k.startswith(prefix) for k in (*_known(), *THEANO_ONLY))


def _dotted(key: str) -> str:
    return key.replace("__", ".")


class _Section:
    """``theano.config.<section>``: its options are ``<section>__<option>``."""

    def __init__(self, config: TheanoConfig, prefix: str):
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str):
        return self._config._get(f"{self._prefix}__{name}")

    def __setattr__(self, name: str, value) -> None:
        self._config._set(f"{self._prefix}__{name}", value)

    def __repr__(self) -> str:
        return f"<theano.config.{_dotted(self._prefix)}>"


class TheanoConfig:
    """``theano.config``: PyTensor's configuration under Theano's names."""

    def __init__(self):
        object.__setattr__(self, "_ignored", {})

    def _get(self, key: str):
        if key in self._ignored:
            return self._ignored[key]
        if key in THEANO_ONLY:
            return THEANO_ONLY[key]
        if key in _known() or hasattr(type(pytensor.config), key):
            return getattr(pytensor.config, key)
        if _has_section(key):
            return _Section(self, key)
        raise AttributeError(
            f"theano.config has no option {_dotted(key)!r}: PyTensor 3 has no such option "
            "(see pytensor.config for those it has)"
        )

    def _set(self, key: str, value) -> None:
        if key in THEANO_ONLY:
            if key == "device" and not str(value).startswith("cpu"):
                warnings.warn(
                    f"theano.config.device={value!r} is ignored: {_NO_GPU}", stacklevel=3
                )
                return
            self._ignored[key] = value
            return
        if key not in _known():
            raise AttributeError(
                f"theano.config has no option {_dotted(key)!r}: PyTensor 3 has no such option"
            )
        setattr(pytensor.config, key, value)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._get(name)

    def __setattr__(self, name: str, value) -> None:
        self._set(name, value)

    def change_flags(self, *args, **kwargs):
        """``theano.config.change_flags``: a context manager / decorator (PyTensor's)."""
        return pytensor.config.change_flags(*args, **kwargs)

    def __dir__(self):
        return sorted({*_known(), *THEANO_ONLY, "change_flags"})

    def __repr__(self) -> str:
        return "<theano.config: pytensor.config under Theano's option names>"


config = TheanoConfig()

#: Theano options that, set to a CPU device or ``dnn.enabled=False``, made
#: Lasagne's ``lasagne.layers.dnn`` raise ``ImportError``.
_CUDNN_SWITCHES = ("device", "dnn__enabled")


def cudnn_refusal() -> str | None:
    """Why ``lasagne.layers.dnn`` must not import, as in Theano, or None.

    Theano had cuDNN only on a GPU device, so the cuDNN layers imported
    only there; code written ``try: from lasagne.layers.dnn import
    Conv2DDNNLayer as ConvLayer / except ImportError: Conv2DLayer`` took the
    ``Conv2DLayer`` branch (``flip_filters=True``) on the CPU.  Unset, the
    shims act as a cuDNN machine (the GPU-era models run); ``device=cpu``
    or ``dnn.enabled=False``, given in ``THEANO_FLAGS`` or set on
    ``theano.config``, chooses the CPU branch as Theano did.

    >>> from lasagne_bn_compat.theano._config import cudnn_refusal
    >>> reason = cudnn_refusal()  # e.g. "device='cpu'" after THEANO_FLAGS=device=cpu
    >>> reason is None or reason.startswith(("device=", "dnn.enabled"))
    True
    """
    device = str(config._ignored.get("device", ""))
    if device.startswith("cpu"):
        return f"device={device!r}"
    if str(config._ignored.get("dnn__enabled", "")) == "False":
        return "dnn.enabled=False"
    return None


def apply_theano_flags(flags: str) -> dict[str, str]:
    """Apply a ``THEANO_FLAGS`` string (``"floatX=float32,mode=FAST_COMPILE"``).

    Options PyTensor has are set in ``pytensor.config``; the others are
    ignored, and one ``UserWarning`` lists them with the reason.

    Returns
    -------
    dict
        The ignored options and why.
    """
    if flags is not None and not isinstance(flags, str):
        raise TypeError(
            f"theano_flags={flags!r} must be a str like 'floatX=float32,mode=FAST_COMPILE'"
        )
    ignored: dict[str, str] = {}
    for item in (flags or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        key = name.replace(".", "__")
        if not sep:
            ignored[name] = "no value given"
            continue
        if key in THEANO_ONLY:
            is_gpu = key == "device" and not value.startswith("cpu")
            if key in _CUDNN_SWITCHES and not is_gpu:
                # Honoured: like Theano, these keep lasagne.layers.dnn unimportable.
                config._ignored[key] = value
                if key == "device" or value == "False":
                    continue
            if is_gpu or key.partition("__")[0] in ("gpuarray", "cuda", "dnn", "lib", "nvcc"):
                ignored[name] = _NO_GPU
            else:
                ignored[name] = "a Theano-only option"
            continue
        if key not in _known():
            ignored[name] = "not an option of PyTensor 3"
            continue
        if str(getattr(pytensor.config, key)) == value:
            continue  # already so (given at import: lasagne_bn_compat._flags)
        if key in IMPORT_TIME_OPTIONS:
            ignored[name] = (
                "PyTensor reads it only when it is first imported; give it in THEANO_FLAGS "
                "before anything imports theano or pytensor (lasagne-bn run does), or in "
                "PYTENSOR_FLAGS"
            )
            continue
        try:
            setattr(pytensor.config, key, value)
        except Exception as exc:
            ignored[name] = f"PyTensor did not accept it ({exc})"
    if ignored:
        listed = "; ".join(f"{name}: {why}" for name, why in ignored.items())
        warnings.warn(f"THEANO_FLAGS options ignored: {listed}", stacklevel=3)
    return ignored
