import collections, sys, os, tempfile, time
sys.argv = ["x"]
import numpy as np
import net_bench as nb
from lasagne_bn.ops import recycle_host_memory
from lasagne_bn.ops.numba import threads as T
from lasagne_bn.ops.numba.linker import NumbaNodeLinker
from pytensor.compile.mode import Mode, get_mode
import pytensor
recycle_host_memory()
net = "dcgan"; cfg = nb.SIZES["full"][net]
nb.use_float32()
with tempfile.TemporaryDirectory() as tmp:
    w = os.path.join(tmp, "w.npz"); nb.save_weights(net, cfg, w)
    graph = nb.lasagne_net(net, cfg); values = np.load(w)
    for p in nb.lasagne_params(graph): p.set_value(values[p.name])
mode = Mode(linker=NumbaNodeLinker(max_interface=0, max_nodes=0), optimizer=get_mode("NUMBA").provided_optimizer)
fn = pytensor.function(list(graph["train_inputs"].values()), graph["loss"], updates=graph["updates"], mode=mode)
data = nb.make_data(net, cfg); args = [data[k] for k in graph["train_inputs"]]
program = nb._find_program(fn)
fn(*args)
seen = collections.Counter()
orig = program.steps
def wrap(node, f):
    name = type(node.op).__name__
    def g(*a):
        r = f(*a)
        if "Conv" in name:
            seen[(name, min(T._STATE[4], T._STATE[5]))] += 1
        return r
    return g
program.steps = [(node, wrap(node, f), *rest) for node, f, *rest in orig]
ts = []
for _ in range(20):
    t = time.perf_counter(); fn(*args); ts.append(time.perf_counter() - t)
print("median step", np.median(ts) * 1e3)
for k, v in sorted(seen.items()): print(k, v)
