"""Save the trained weights as Lasagne files, reload them, and check the predictions."""

from __future__ import annotations

from lasagne_bn._files import RunFolder
from lasagne_bn.demo.console import Console
from lasagne_bn.demo.data import Data
from lasagne_bn.demo.network import compile_predict

# The inv_std file must give identical predictions (the same graph on the same
# values); the var file may differ by the rounding of var -> 1/sqrt(var + eps).
RELOAD_TOLERANCE = 1e-5

FILES = {  # stat_storage -> (file name, what it holds)
    "inv_std": ("weights_inv_std.npz", "legacy Lasagne format, batch-norm statistics as inv_std"),
    "var": ("weights_var.npz", "the same, with the statistics as var"),
}


def save_and_reload(
    network, fresh: dict, run_folder: RunFolder, data: Data, reference, console: Console
) -> tuple[list[dict], list[str]]:
    """Save in both storages, load each into the fresh network of that storage, compare.

    The files are written as Lasagne users write them (``np.savez(path,
    *get_all_param_values(net))``) and read back the same way.  Returns the
    rows for metrics.json and the failed checks (predictions that moved more
    than :data:`RELOAD_TOLERANCE`, or other labels).
    """
    import numpy as np

    from lasagne_bn.layers import get_all_param_values, set_all_param_values
    from lasagne_bn.layers.bn_storage import convert_param_values

    values = get_all_param_values(network)
    file_values = {
        "inv_std": values,
        "var": convert_param_values(network, values, to_storage="var"),
    }
    for i, (storage, (name, note)) in enumerate(FILES.items()):
        np.savez(run_folder.path(name), *file_values[storage])
        console.line(f"{'saved' if i == 0 else '':<9}{run_folder.final(name)}  ({note})")
    console.line(
        "reloaded into fresh networks (Lasagne's recipe), predictions vs the trained one:"
    )
    rows, failures = [], []
    for storage, (name, _) in FILES.items():
        path = run_folder.final(name)
        with np.load(run_folder.path(name)) as f:
            loaded = [f[f"arr_{i}"] for i in range(len(f.files))]
        set_all_param_values(fresh[storage], loaded)
        probs = compile_predict(fresh[storage], None)(data.x_test)
        diff = float(np.max(np.abs(probs - reference)))
        same_labels = bool(np.array_equal(probs.argmax(1), reference.argmax(1)))
        rows.append(
            {
                "storage": storage,
                "file": str(path),
                "max_abs_diff": diff,
                "same_labels": same_labels,
            }
        )
        target = f"{path.name} -> stat_storage={storage!r} network:"
        console.line(
            f"{'':<9}{target:<56}max |diff| {diff:.1e}, "
            f"{'same' if same_labels else 'DIFFERENT'} labels"
        )
        if not (diff <= RELOAD_TOLERANCE and same_labels):
            failures.append(
                f"the network reloaded from {path.name} predicts differently "
                f"(max |diff| {diff:.2e} > {RELOAD_TOLERANCE:g} or other labels)"
            )
    return rows, failures
