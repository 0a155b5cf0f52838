"""Reproduce benchmarks/results/gpytorch_baseline.json: the GPyTorch SVGP peer on diamonds.

Measures, in float64 with a fixed number of torch threads (default 2, the CI
machine's core count):

* seconds per training step (median, after warm-ups) for both modes (Adam, NGD+Adam)
  for M in {64, 256, 1024} at batch 1024 and for batch in {256, 1024, 4096} at M 256;
* full training at M 256, batch 1024: Adam for 50 epochs and NGD for 15 epochs,
  with test RMSE, Gaussian NLPD (standardised log-price units) and fit time.

Usage (from the repository root)::

    python benchmarks/run_gpytorch_baseline.py                 # everything, ~3 min
    python benchmarks/run_gpytorch_baseline.py --only timing   # per-step table only
    python benchmarks/run_gpytorch_baseline.py --only train --adam-epochs 5 --out /tmp/x.json

The JSON is rewritten after each measurement so an interrupted run keeps what it had.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # run as a script: the helpers are siblings, not a package

from _data import gaussian_nlpd, init_inducing, load_diamonds, rmse  # noqa: E402
from _gpytorch_peer import (  # noqa: E402
    fit_gpytorch,
    predict_gpytorch,
    time_gpytorch_step,
    versions,
)

STEP_CONFIGS = [(64, 1024), (256, 1024), (1024, 1024), (256, 256), (256, 4096)]  # (M, batch)


def _dump(results, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(path)  # atomic: never leave a half-written file behind


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "results" / "gpytorch_baseline.json")
    p.add_argument("--only", choices=["timing", "train"], default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-steps", type=int, default=30, help="timed steps per config")
    p.add_argument("--n-warmup", type=int, default=5)
    p.add_argument("--adam-epochs", type=int, default=50)
    p.add_argument("--ngd-epochs", type=int, default=15)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)

    X_tr, X_te, y_tr, y_te, stats = load_diamonds(random_state=args.seed, return_stats=True)
    results = {
        "meta": {
            "versions": {**versions(), "numpy": np.__version__, "python": platform.python_version()},
            "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                        "processor": platform.processor()},
            "threads": args.threads,
            "dtype": "float64",
            "dataset": {"name": "diamonds", "target": "log(price), standardised",
                        "n_train": int(X_tr.shape[0]), "n_test": int(X_te.shape[0]),
                        "d": int(X_tr.shape[1]), "y_std_log_price": stats["y_std"],
                        "split_seed": args.seed},
            "model": "whitened VariationalStrategy, learned Z, ZeroMean, "
                     "ScaleKernel(RBFKernel(ard)), GaussianLikelihood, VariationalELBO",
            "init": {"Z0": f"init_inducing(X_train, M, random_state={args.seed})",
                     "lengthscale": 1.0, "outputscale": 1.0, "noise": 1.0},
            "modes": {"adam": "Adam lr 0.01 on all parameters (CholeskyVariationalDistribution)",
                      "ngd": "NGD lr 0.1 on NaturalVariationalDistribution + Adam lr 0.01 "
                             "on hyperparameters, Z, noise"},
        },
        # which command/date produced each section (a section can be re-run alone)
        "runs": {},
        "step_seconds": [],
        "training": [],
    }
    this_run = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                "command": "python " + " ".join([os.path.relpath(__file__)] + sys.argv[1:])}
    if args.out.exists() and args.only:  # keep the other section when re-running only one
        old = json.loads(args.out.read_text())
        keep = "training" if args.only == "timing" else "step_seconds"
        results[keep] = old.get(keep, [])
        if keep in old.get("runs", {}):
            results["runs"][keep] = old["runs"][keep]

    if args.only in (None, "timing"):
        results["runs"]["step_seconds"] = this_run
        for M, B in STEP_CONFIGS:
            Z0 = init_inducing(X_tr, M, random_state=args.seed)
            for mode in ("adam", "ngd"):
                med, times = time_gpytorch_step(
                    X_tr, y_tr, Z0, B, args.n_steps, mode=mode, n_warmup=args.n_warmup,
                    seed=args.seed, threads=args.threads, return_times=True,
                )
                row = {"M": M, "batch": B, "mode": mode, "median_s": med,
                       "p10_s": float(np.percentile(times, 10)),
                       "p90_s": float(np.percentile(times, 90)),
                       "n_steps": args.n_steps, "n_warmup": args.n_warmup}
                results["step_seconds"].append(row)
                print(f"step  M={M:5d} B={B:5d} {mode:4s}  median {med * 1e3:8.2f} ms  "
                      f"(p10 {row['p10_s'] * 1e3:.2f}, p90 {row['p90_s'] * 1e3:.2f})", flush=True)
                _dump(results, args.out)

    if args.only in (None, "train"):
        results["runs"]["training"] = this_run
        M, B = 256, 1024
        Z0 = init_inducing(X_tr, M, random_state=args.seed)
        for mode, epochs in (("adam", args.adam_epochs), ("ngd", args.ngd_epochs)):
            model, lik, secs, elbos = fit_gpytorch(
                X_tr, y_tr, Z0, B, epochs, mode=mode, seed=args.seed, threads=args.threads,
                verbose=args.verbose,
            )
            t0 = time.perf_counter()
            mean, var = predict_gpytorch(model, lik, X_te, threads=args.threads)
            pred_secs = time.perf_counter() - t0
            kern = model.covar_module
            row = {
                "M": M, "batch": B, "mode": mode, "epochs": epochs,
                "steps": epochs * -(-X_tr.shape[0] // B),
                "fit_seconds": secs, "predict_seconds": pred_secs,
                "test_rmse": rmse(y_te, mean), "test_nlpd": gaussian_nlpd(y_te, mean, var),
                "test_rmse_log_price": rmse(y_te, mean) * stats["y_std"],
                "per_epoch_elbo": elbos,
                "learned": {"noise": float(lik.noise.item()),
                            "outputscale": float(kern.outputscale.item()),
                            "lengthscale": kern.base_kernel.lengthscale.detach().ravel().tolist()},
            }
            results["training"].append(row)
            print(f"train {mode:4s} {epochs:3d} epochs  fit {secs:7.1f} s  "
                  f"RMSE {row['test_rmse']:.4f}  NLPD {row['test_nlpd']:.4f}  "
                  f"noise {row['learned']['noise']:.4f}", flush=True)
            _dump(results, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
