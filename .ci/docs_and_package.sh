#!/usr/bin/env bash
# CI: the documentation and the package.  Builds the docs with warnings as
# errors, runs every documentation example, checks in headless Chromium that
# the built pages render (title, the API index, the performance plot), builds
# wheel and sdist, runs twine check, installs the wheel in a fresh virtual
# environment and runs the demo and the legacy shims' import from it.
# PYTHON: the interpreter whose environment has the 'all' extra
# (default .venv/bin/python, as .ci/run sets up).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { echo "== $(date -u +%H:%M:%S) $*"; }

step "docs: sphinx-build -W"
rm -rf docs/generated
"$PYTHON" -m sphinx -q -E -W --keep-going -b html docs "$work/html"

# The examples are tests of the full tier (tests/test_docs_examples.py):
# .ci/run has run them by now and says so with DOC_EXAMPLES_RAN=1.
if [ "${DOC_EXAMPLES_RAN:-0}" != "1" ]; then
    step "docs: every example runs"
    "$PYTHON" -m pytest -q -n 0 -p no:cacheprovider --full tests/test_docs_examples.py
fi

step "docs: the built pages render in headless Chromium"
if ! command -v chromium >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# A fresh profile, and no background connections: this machine's network is
# closed, and Chromium would keep trying its own services.
chrome=(chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=5000
    --no-first-run --disable-background-networking --disable-component-update
    --disable-sync --disable-quic "--user-data-dir=$work/chromium-profile")
"${chrome[@]}" --dump-dom "file://$work/html/index.html" >"$work/index.dom" 2>/dev/null
"${chrome[@]}" --dump-dom "file://$work/html/api.html" >"$work/api.dom" 2>/dev/null
# The plot's natural width is set by the browser only once the PNG decoded.
perf="file://$work/html/performance.html"
probe="$work/probe.html"
cat >"$probe" <<HTML
<html><body><script>
const img = new Image();
img.onload = () => { document.body.setAttribute("data-plot", img.naturalWidth + "x" + img.naturalHeight); };
img.onerror = () => { document.body.setAttribute("data-plot", "error"); };
img.src = "$work/html/_images/bn_bench.png";
</script></body></html>
HTML
"${chrome[@]}" --allow-file-access-from-files --dump-dom "file://$probe" >"$work/probe.dom" 2>/dev/null
"${chrome[@]}" --dump-dom "$perf" >"$work/perf.dom" 2>/dev/null
"$PYTHON" - "$work" <<'PY'
import re, sys
from pathlib import Path
work = Path(sys.argv[1])
index, api = (work / "index.dom").read_text(), (work / "api.dom").read_text()
perf, probe = (work / "perf.dom").read_text(), (work / "probe.dom").read_text()
assert re.search(r"<title>lasagne_bn", index), "index.html: no title 'lasagne_bn'"
for name in ("lasagne_bn.layers", "lasagne_bn.export", "lasagne_bn_compat.io"):
    assert name in api, f"api.html: {name} missing from the API index"
assert 'src="_images/bn_bench.png"' in perf, "performance.html: no plot image"
size = re.search(r'data-plot="([^"]*)"', probe)
assert size and re.fullmatch(r"[1-9]\d*x[1-9]\d*", size.group(1)), f"plot did not load: {size}"
print(f"rendered: title, API index, plot {size.group(1)} px")
PY

step "package: wheel and sdist, twine check"
"$PYTHON" -m build -q --outdir "$work/dist" . >/dev/null
"$PYTHON" -m twine check --strict "$work/dist"/*

step "package: the wheel in a fresh virtual environment"
# Nothing of the source tree on the path: build leaves lasagne_bn.egg-info
# there, which pip would take for the installed distribution.
unset PYTHONPATH
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$(ls "$work"/dist/*.whl)[demo]"
cd "$work"  # away from the source tree, so only the installed package imports
"$work/venv/bin/python" -c "import lasagne_bn_compat, lasagne_bn; print('imported', lasagne_bn.__version__)"
"$work/venv/bin/python" - <<'PY'
import importlib.util, sys
from importlib import metadata
assert importlib.util.find_spec("compat") is None, "a top-level 'compat' package is installed"
top = metadata.distribution("lasagne-bn").read_text("top_level.txt")
names = set(top.split()) if top else {
    f.parts[0] for f in metadata.files("lasagne-bn") if f.parts[0].isidentifier()
}
assert names <= {"lasagne_bn", "lasagne_bn_compat"}, names
print("top-level packages:", sorted(names))
PY
"$work/venv/bin/lasagne-bn" demo --epochs 1 --out "$work/demo" --quiet
step "done"
