"""The orthogonally decoupled basis: step time, diamonds accuracy, KEEL classification.

    python benchmarks/bench_orth_decoupled.py --parts steps diamonds init gamma_step classify

Parts (each writes its own key of benchmarks/results/orth_decoupled.json):

- ``steps``: median step time (ELBO + gradients, natural step, Adam; batch 1024) on
  diamonds of coupled(M) for several M and of orth_decoupled(128 beta + n_orthogonal gamma)
  for n_orthogonal 256..4096, exact KL and the column-sampled KL (64 columns); the methods
  are interleaved round by round in one process.
- ``diamonds``: orth_decoupled(128 + 1024) against coupled(128) and against the coupled
  model whose step takes as long (M from ``steps``), the same number of epochs each: test
  RMSE, NLPD and fit time.
- ``init``: orth_decoupled(128 + 1024) on diamonds from our initialisation (k-means of 1152
  centres, beta the first 128, i.e. the first k-means++ seeds) against the paper's code
  (k-means of 1024 centres for gamma, beta a random subset of them).
- ``gamma_step``: Adam on the gamma coefficients against the paper's diagonal step (eq. 17)
  at a few step sizes, on diamonds.
- ``classify``: SparseGPClassifier coupled(128) against orth_decoupled(128 + 512) on
  magic and ring: test accuracy, log-loss, fit time.

Timings come from a shared 2-core machine: ratios within one run mean more than absolutes.
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import accuracy_score, log_loss

from _data import gaussian_nlpd, load_diamonds, load_keel, rmse
from _ours import time_our_step

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import orth_decoupled
from skgp_sparse.inducing import kmeans_centres

RESULTS = Path(__file__).parent / "results" / "orth_decoupled.json"
BATCH = 1024
N_BETA = 128
N_GAMMA = 1024


def _fit_regressor(X, y, Xt, yt, epochs, **params):
    reg = SparseGPRegressor(batch_size=BATCH, max_iter=epochs, tol=0.0, n_iter_no_change=10**6, random_state=0,
                            **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        reg.fit(X, y)
        seconds = time.perf_counter() - start
    mean, std = reg.predict(Xt, return_std=True)
    return {"rmse": rmse(yt, mean), "nlpd": gaussian_nlpd(yt, mean, std**2), "fit_s": seconds,
            "epochs": reg.n_iter_, "steps": reg.n_steps_, "noise": reg.noise_variance_}


def part_steps(X, y, args):
    rng = np.random.default_rng(0)
    beta = X[np.sort(rng.choice(X.shape[0], N_BETA, replace=False))]
    configs = {f"coupled_{m}": dict(basis="coupled", Z=X[np.sort(rng.choice(X.shape[0], m, replace=False))])
               for m in args.coupled_sizes}
    for mg in args.gamma_sizes:
        gamma = X[np.sort(rng.choice(X.shape[0], mg, replace=False))]
        for cols in (None, 64):
            name = f"orth_{N_BETA}+{mg}" + ("" if cols is None else f"_cols{cols}")
            configs[name] = dict(basis="orth_decoupled", Z=np.vstack([beta, gamma]), n_orthogonal=mg, cols=cols)
    times = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, cfg in configs.items():
            orth_decoupled.KL_COLUMNS = cfg.get("cols")
            times[name].append(time_our_step(X, y, cfg["Z"], BATCH, n_steps=args.steps, basis=cfg["basis"],
                                             n_orthogonal=cfg.get("n_orthogonal", 0)))
    orth_decoupled.KL_COLUMNS = None
    return {name: {"median_step_ms": 1e3 * float(np.median(t)), "rounds_ms": [1e3 * v for v in t]}
            for name, t in times.items()}


def part_diamonds(X, y, Xt, yt, args, equal_m):
    out = {}
    runs = {
        f"orth_{N_BETA}+{N_GAMMA}": dict(basis="orth_decoupled", n_inducing=N_BETA, n_orthogonal=N_GAMMA),
        f"coupled_{N_BETA}": dict(basis="coupled", n_inducing=N_BETA),
        f"coupled_{equal_m}_equal_step_time": dict(basis="coupled", n_inducing=equal_m),
    }
    for name, params in runs.items():
        out[name] = _fit_regressor(X, y, Xt, yt, args.epochs, **params)
        print(name, out[name], flush=True)
    return out


def part_init(X, y, Xt, yt, args):
    rng = np.random.default_rng(0)
    gamma = kmeans_centres(X, N_GAMMA, rng)
    beta = gamma[np.sort(rng.choice(N_GAMMA, N_BETA, replace=False))]
    out = {}
    for name, init in (("ours_kmeans_all_split", "kmeans"), ("paper_kmeans_gamma_beta_subset", np.vstack([beta, gamma]))):
        out[name] = _fit_regressor(X, y, Xt, yt, args.epochs, basis="orth_decoupled", n_inducing=N_BETA,
                                   n_orthogonal=N_GAMMA, inducing_init=init)
        print(name, out[name], flush=True)
    return out


def part_gamma_step(X, y, Xt, yt, args):
    out = {}
    for mode, tau in [("adam", None)] + [("diagonal", t) for t in args.diagonal_steps]:
        orth_decoupled.GAMMA_STEP = mode
        if tau is not None:
            orth_decoupled.DIAGONAL_STEP_SIZE = tau
        name = mode if tau is None else f"diagonal_{tau:g}"
        try:
            out[name] = _fit_regressor(X, y, Xt, yt, args.epochs, basis="orth_decoupled", n_inducing=N_BETA,
                                       n_orthogonal=N_GAMMA)
        except Exception as exc:  # a diverging step size is a result too
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(name, out[name], flush=True)
    orth_decoupled.GAMMA_STEP, orth_decoupled.DIAGONAL_STEP_SIZE = "adam", 1e-3
    return out


def part_classify(args):
    out = {}
    for data in args.sets:
        X, Xt, y, yt = load_keel(data)
        out[data] = {}
        for name, params in ((f"coupled_{N_BETA}", dict(basis="coupled")),
                             (f"orth_{N_BETA}+{args.class_gamma}", dict(basis="orth_decoupled",
                                                                       n_orthogonal=args.class_gamma))):
            clf = SparseGPClassifier(n_inducing=N_BETA, batch_size=BATCH, max_iter=args.class_epochs, random_state=0,
                                     **params)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                clf.fit(X, y)
                seconds = time.perf_counter() - start
            proba = clf.predict_proba(Xt)
            out[data][name] = {"accuracy": accuracy_score(yt, clf.classes_[proba.argmax(axis=1)]),
                               "log_loss": log_loss(yt, proba, labels=clf.classes_), "fit_s": seconds,
                               "epochs": clf.n_iter_}
            print(data, name, out[data][name], flush=True)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", nargs="+", default=["steps", "diamonds", "init", "gamma_step", "classify"])
    parser.add_argument("--epochs", type=int, default=8, help="diamonds epochs (47 steps each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--coupled-sizes", type=int, nargs="+", default=[128, 192, 256, 320, 384])
    parser.add_argument("--gamma-sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--equal-m", type=int, default=None, help="coupled M with orth's step time (else from steps)")
    parser.add_argument("--diagonal-steps", type=float, nargs="+", default=[1e-3, 1e-4, 1e-5])
    parser.add_argument("--sets", nargs="+", default=["magic", "ring"])
    parser.add_argument("--class-gamma", type=int, default=512)
    parser.add_argument("--class-epochs", type=int, default=15)
    args = parser.parse_args()

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.pop("command", None)
    results.setdefault("commands", {})[" ".join(args.parts)] = "python benchmarks/bench_orth_decoupled.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if v is not None)
    X, Xt, y, yt = load_diamonds()
    if "steps" in args.parts:
        results["steps"] = part_steps(X, y, args)
        for name, r in results["steps"].items():
            print(f"{name:28s} {r['median_step_ms']:8.1f} ms", flush=True)
    equal_m = args.equal_m
    if equal_m is None and "steps" in results:
        target = results["steps"][f"orth_{N_BETA}+{N_GAMMA}"]["median_step_ms"]
        coupled = {int(k.split("_")[1]): v["median_step_ms"] for k, v in results["steps"].items()
                   if k.startswith("coupled_")}
        equal_m = min(coupled, key=lambda m: abs(coupled[m] - target))
    if "diamonds" in args.parts:
        results["diamonds"] = part_diamonds(X, y, Xt, yt, args, equal_m or 256)
    if "init" in args.parts:
        results["init"] = part_init(X, y, Xt, yt, args)
    if "gamma_step" in args.parts:
        results["gamma_step"] = part_gamma_step(X, y, Xt, yt, args)
    if "classify" in args.parts:
        results["classify"] = part_classify(args)
    RESULTS.write_text(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
