"""Limits of the estimators, measured: peak memory, cold start, a real Ctrl-C.

Every measurement runs in a fresh Python subprocess (peak RSS and start-up cost are
properties of a process). Results go to benchmarks/results/limits.json.

    python benchmarks/bench_limits.py              # everything (a few minutes)
    python benchmarks/bench_limits.py --quick      # 100,000 rows instead of 1,000,000

Memory: peak resident set size (``ru_maxrss``) above the baseline taken once the input is
in memory (and after a tiny warm-up fit, so that numba's compilation or cache load is not
counted): the extra memory that fitting and predicting need. Two inputs: a numpy array,
and a Dask array that is generated chunk by chunk and never held in memory whole.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "limits.json"

PRELUDE = """
import resource, time, warnings
import numpy as np
warnings.simplefilter("ignore")
from skgp_sparse import SparseGPRegressor

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def warm_up():
    rng = np.random.default_rng(1)
    Xw = rng.standard_normal((300, 10))
    SparseGPRegressor(n_inducing=20, max_iter=1).fit(Xw, Xw[:, 0]).predict(Xw)
"""

MEMORY_NUMPY = """
warm_up()
n, d, m = {n}, 10, 256
rng = np.random.default_rng(0)
X = rng.standard_normal((n, d))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
base = max(rss_mib(), peak_mib())
input_mib = (X.nbytes + y.nbytes) / 2**20
t = time.perf_counter()
reg = SparseGPRegressor(n_inducing=m, batch_size=1024, max_iter=1, random_state=0).fit(X, y)
fit_s = time.perf_counter() - t
fit_peak = peak_mib()
t = time.perf_counter()
pred = reg.predict(X, return_std=True)
predict_s = time.perf_counter() - t
print(json.dumps(dict(rows=n, features=d, n_inducing=m, batch_size=1024, epochs=1, input_mib=input_mib,
                      baseline_rss_mib=base, fit_peak_above_baseline_mib=fit_peak - base,
                      predict_peak_above_baseline_mib=peak_mib() - base,
                      predict_output_mib=(pred[0].nbytes + pred[1].nbytes) / 2**20,
                      n_by_m_matrix_mib=n * m * 8 / 2**20, fit_s=fit_s, predict_s=predict_s,
                      steps=int(reg.n_steps_))))
"""

MEMORY_DASK = """
import dask, dask.array as da
dask.config.set(scheduler="synchronous")
warm_up()
n, d, m, chunk = {n}, 10, 256, 50_000
X = da.random.default_rng(0).standard_normal((n, d), chunks=(chunk, d))
y = (da.sin(X[:, 0]) + 0.5 * X[:, 1]).compute()
base = max(rss_mib(), peak_mib())
t = time.perf_counter()
reg = SparseGPRegressor(n_inducing=m, batch_size=1024, max_iter=1, random_state=0).fit(X, y)
fit_s = time.perf_counter() - t
fit_peak = peak_mib()
t = time.perf_counter()
mean = reg.predict(X)
assert isinstance(mean, da.Array)
total = float(mean.sum().compute())
predict_s = time.perf_counter() - t
print(json.dumps(dict(rows=n, features=d, n_inducing=m, batch_size=1024, epochs=1, chunk_rows=chunk,
                      x_never_in_memory_mib=n * d * 8 / 2**20, baseline_rss_mib=base,
                      fit_peak_above_baseline_mib=fit_peak - base,
                      predict_peak_above_baseline_mib=peak_mib() - base, fit_s=fit_s,
                      predict_s=predict_s, steps=int(reg.n_steps_))))
"""

COLD_START = """
import time
t0 = time.perf_counter()
import numpy as np, scipy.linalg, numba, sklearn.base, sklearn.cluster, sklearn.gaussian_process.kernels
td = time.perf_counter()
from skgp_sparse import SparseGPRegressor
t1 = time.perf_counter()
rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (500, 2))
y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(500)
reg = SparseGPRegressor(n_inducing=20, max_iter=5, random_state=0).fit(X, y)
reg.predict(X, return_std=True)
t2 = time.perf_counter()
print(json.dumps(dict(import_dependencies_s=td - t0, import_skgp_sparse_own_s=t1 - td, import_s=t1 - t0,
                      first_fit_and_predict_s=t2 - t1, total_s=t2 - t0)))
"""

INTERRUPTED = """
import signal, sys
rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (20000, 2))
y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(20000)
reg = SparseGPRegressor(n_inducing=100, batch_size=256, max_iter=100000, tol=0, random_state=0)
reg._epoch_callback = lambda model, history: print("EPOCH", flush=True) if history.n_epochs == 1 else None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    reg.fit(X, y)
stopped = time.perf_counter()
pred = reg.predict(X[:1000])
print(json.dumps(dict(steps=int(reg.n_steps_), epochs=int(reg.n_iter_), stopped_at=time.time(),
                      finite=bool(np.all(np.isfinite(pred))), r2=float(reg.score(X[:1000], y[:1000])),
                      warning=[str(w.message) for w in caught if "interrupted" in str(w.message)][:1])))
"""


#: One BLAS/OpenMP thread in every measured process: the machine is shared, and two
#: spinning BLAS threads on a busy 2-core machine make a step 10-30 times slower.
THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def run_python(body, env=None, prelude=True, **fmt):
    code = "import json\n" + (textwrap.dedent(PRELUDE) if prelude else "") + textwrap.dedent(body).format(**fmt)
    env = {**os.environ, **THREADS, **(env or {}), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cold_start():
    """First fit with an empty numba cache (just installed), then two later processes."""
    with tempfile.TemporaryDirectory() as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        fresh = run_python(COLD_START, env, prelude=False)
        later = [run_python(COLD_START, env, prelude=False) for _ in range(3)]
    return {"empty_numba_cache": fresh, "cache_loaded": later}


def ctrl_c():
    """A real SIGINT to a long fit, one epoch in: does it stop, and how fast?"""
    code = "import json\n" + textwrap.dedent(PRELUDE) + textwrap.dedent(INTERRUPTED)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **THREADS, "PYTHONPATH": str(ROOT)})
    for line in proc.stdout:
        if line.startswith("EPOCH"):
            break
    time.sleep(1.0)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    result = json.loads(out.strip().splitlines()[-1])
    result["seconds_from_sigint_to_stop"] = result.pop("stopped_at") - sent
    result["exit_code"] = proc.returncode
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows instead of 1,000,000")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_000_000
    results = {
        "machine": "shared 2-core machine (other jobs running): timings are noisy; one BLAS thread per process",
        "command": "python benchmarks/bench_limits.py" + (" --quick" if args.quick else ""),
    }
    results["cold_start"] = cold_start()
    print(json.dumps(results["cold_start"], indent=1), flush=True)
    results["ctrl_c"] = ctrl_c()
    print(json.dumps(results["ctrl_c"], indent=1), flush=True)
    results["memory_numpy"] = run_python(MEMORY_NUMPY, n=n)
    print(json.dumps(results["memory_numpy"], indent=1), flush=True)
    results["memory_dask"] = run_python(MEMORY_DASK, n=n)
    print(json.dumps(results["memory_dask"], indent=1), flush=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
