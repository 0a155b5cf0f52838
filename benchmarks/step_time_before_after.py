"""One training step (evaluate + natural step) of the regressor, of the classifier (2 and 10
classes) and of an LMC (3 outputs, 2 latents), M = 256, batch 1,024, one thread, median of 20
steps, for the checkout at a path.

Run it alternately on two checkouts to compare a change's step time:

    git worktree add /tmp/base <rev>
    for c in /tmp/base "$PWD" /tmp/base "$PWD"; do
        OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/step_time_before_after.py $c
    done

Optional arguments after the checkout: the number of inducing inputs (default 256) and
the cases to run, comma-separated (default all: regressor,classifier 2,classifier 10,lmc),
e.g. ``python benchmarks/step_time_before_after.py $c 1024 regressor``.
"""
import sys, time, warnings, json
sys.path.insert(0, sys.argv[1])
import numpy as np
warnings.simplefilter("ignore")
from threadpoolctl import threadpool_limits
import skgp_sparse
from skgp_sparse import SparseGPRegressor, SparseGPClassifier
assert skgp_sparse.__file__.startswith(sys.argv[1]), skgp_sparse.__file__
M = int(sys.argv[2]) if len(sys.argv) > 2 else 256
chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else None
rng = np.random.default_rng(0); n = 4096
X = rng.normal(size=(n, 4)); B = 1024
out = {}
cases = {
    "regressor": (SparseGPRegressor(n_inducing=M, batch_size=B, max_iter=1, random_state=0), np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)),
    "classifier 2": (SparseGPClassifier(n_inducing=M, max_iter=1, random_state=0), (X[:, 0] > 0).astype(int)),
    "classifier 10": (SparseGPClassifier(n_inducing=M, max_iter=1, random_state=0), np.digitize(X[:, 0], np.quantile(X[:, 0], np.linspace(0.1, 0.9, 9)))),
    "lmc": (SparseGPRegressor(n_inducing=M, batch_size=B, max_iter=1, n_latent=2, random_state=0),
            np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 1]), np.sin(X[:, 0]) - X[:, 2]]) + 0.1 * rng.normal(size=(n, 3))),
}
cases = {name: case for name, case in cases.items() if chosen is None or name in chosen}
with threadpool_limits(1):
    for name, (est, y) in cases.items():
        est.fit(X, y)
        model = est._fitted_model(n)
        Y = est._bound_targets(y)
        Y = Y.reshape(n, -1)
        xb, yb = X[:B], Y[:B]
        times = []
        for i in range(23):
            t = time.perf_counter()
            r = model.evaluate(xb, yb)
            size = 0.1
            while True:
                try:
                    model.state = model.natural_step(r, size)
                    break
                except Exception:
                    size *= 0.5
            times.append(time.perf_counter() - t)
        out[name] = float(np.median(times[3:]))
print(json.dumps(out))
