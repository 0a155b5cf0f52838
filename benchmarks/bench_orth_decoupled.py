"""The orthogonally decoupled basis: step time, diamonds accuracy, KEEL classification.

    python benchmarks/bench_orth_decoupled.py --parts steps diamonds init kl_columns classify

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
- ``kl_columns``: the exact a^T K_gg a against the column-sampled estimate (``--columns``),
  orth_decoupled(128 + ``--kl-gammas``) on diamonds and flights: test RMSE, NLPD, fit time
  and the median step time of each.
- ``classify``: SparseGPClassifier coupled(128) against orth_decoupled(128 + 512) on
  magic and ring: test accuracy, log-loss, fit time.

The estimators do not pass ``kl_columns`` to ``orth_decoupled.init_state`` yet: the parts
that vary it bind it for the duration of one fit (:func:`basis_options`). Two entries of
the results are history, from modes since removed after these measurements: ``gamma_step``
(the paper's diagonal step, eq. 17, against Adam) and ``gamma_scaling`` (Adam on
u = a D^p, the paper's code's rescaling by the residual variances, p = 0.5 and 1, against
Adam on a). docs/bases/orth_decoupled.md has both tables.

Timings come from a shared 2-core machine: ratios within one run mean more than absolutes.
"""
import argparse
import contextlib
import functools
import json
import time
import warnings
from pathlib import Path

import sys

import numpy as np
from sklearn.metrics import accuracy_score, log_loss

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import gaussian_nlpd, load_diamonds, load_keel, load_regression, rmse
from _ours import time_our_step

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import orth_decoupled
from skgp_sparse.inducing import kmeans_centres

RESULTS = Path(__file__).parent / "results" / "orth_decoupled.json"
BATCH = 1024
N_BETA = 128
N_GAMMA = 1024


@contextlib.contextmanager
def basis_options(**options):
    """Fits started inside get these keyword arguments of ``orth_decoupled.init_state``
    (the estimators do not pass any yet): patched on the module for the ``with`` block."""
    original = orth_decoupled.init_state
    orth_decoupled.init_state = functools.partial(original, **options)
    try:
        yield
    finally:
        orth_decoupled.init_state = original


def _fit_regressor(X, y, Xt, yt, epochs, options=None, **params):
    reg = SparseGPRegressor(batch_size=BATCH, max_iter=epochs, tol=0.0, n_iter_no_change=10**6, random_state=0,
                            **params)
    with warnings.catch_warnings(), basis_options(**(options or {})):
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        reg.fit(X, y)
        seconds = time.perf_counter() - start
    mean, std = reg.predict(Xt, return_std=True)
    out = {"rmse": rmse(yt, mean), "nlpd": gaussian_nlpd(yt, mean, std**2), "fit_s": seconds,
           "epochs": reg.n_iter_, "steps": reg.n_steps_, "noise": reg.noise_variance_}
    if reg.basis == "orth_decoupled" and reg.n_orthogonal:
        out.update(_gamma_summary(reg, Xt))
    return out


def _gamma_summary(reg, Xt):
    """How far the gamma coefficients moved and what the gamma part adds to the test mean."""
    from skgp_sparse.kernels import compile_kernel

    kernel = compile_kernel(reg.kernel_, white_as_noise=True)
    state = reg.variational_state_
    a = state.orth_mean
    # The gamma part of the mean, (k_xg - k_xb K^-1 K_bg) a: the mean less that of a = 0.
    without = state.copy()
    without.orth_mean = np.zeros_like(state.orth_mean)
    rows = Xt[:2000]
    gamma_part = (orth_decoupled.marginals(kernel, rows, state, reg.jitter_, False)[0]
                  - orth_decoupled.marginals(kernel, rows, without, reg.jitter_, False)[0])
    # D: the residual variance of each gamma function given beta (its square root is the
    # size of that function, so a ~ residual / sqrt(D) is the scale the coefficients need).
    kbb = kernel(state.inducing)
    kbb = kbb + reg.jitter_ * np.mean(np.diag(kbb)) * np.eye(kbb.shape[0])
    kgb = kernel(state.orthogonal, state.inducing)
    d = kernel.diag(state.orthogonal) - np.einsum("ij,ji->i", kgb, np.linalg.solve(kbb, kgb.T))
    return {"rms_a": float(np.sqrt(np.mean(a**2))), "max_abs_a": float(np.max(np.abs(a))),
            "gamma_part_rms": float(np.sqrt(np.mean(gamma_part**2))),
            "d_quantiles": [float(q) for q in np.quantile(d, [0.0, 0.1, 0.5, 0.9, 1.0])]}


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
            options = {} if cfg["basis"] != "orth_decoupled" else {"kl_columns": cfg.get("cols")}
            with basis_options(**options):
                times[name].append(time_our_step(X, y, cfg["Z"], BATCH, n_steps=args.steps, basis=cfg["basis"],
                                                 n_orthogonal=cfg.get("n_orthogonal", 0)))
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


def _regression_sets(args):
    """(name, X, y, Xt, yt, epochs) of the sets the option parts compare on."""
    for name in args.option_sets:
        X, Xt, y, yt = load_regression(name)
        yield name, X, y, Xt, yt, args.option_epochs if name == "diamonds" else max(1, args.option_epochs // 2)


def _step_ms(X, y, n_gamma, options, args):
    rng = np.random.default_rng(0)
    Z = X[np.sort(rng.choice(X.shape[0], N_BETA + n_gamma, replace=False))]
    with basis_options(**options):
        return 1e3 * time_our_step(X, y, Z, BATCH, n_steps=args.steps, basis="orth_decoupled", n_orthogonal=n_gamma)


def part_kl_columns(args):
    out = {}
    for name, X, y, Xt, yt, epochs in _regression_sets(args):
        out[name] = {}
        for n_gamma in args.kl_gammas:
            for cols in ([] if args.no_exact else [None]) + [c for c in args.columns if c < n_gamma]:
                key = f"orth_{N_BETA}+{n_gamma}_" + ("exact" if cols is None else f"cols{cols}")
                options = {"kl_columns": cols, "seed": 0}
                res = _fit_regressor(X, y, Xt, yt, epochs, options, basis="orth_decoupled", n_inducing=N_BETA,
                                     n_orthogonal=n_gamma)
                res["step_ms"] = _step_ms(X, y, n_gamma, options, args)
                out[name][key] = res
                print(name, key, res, flush=True)
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
    parser.add_argument("--parts", nargs="+",
                        default=["steps", "diamonds", "init", "kl_columns", "classify"])
    parser.add_argument("--epochs", type=int, default=8, help="diamonds epochs (47 steps each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--coupled-sizes", type=int, nargs="+", default=[128, 192, 256, 320, 384])
    parser.add_argument("--gamma-sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--equal-m", type=int, default=None, help="coupled M with orth's step time (else from steps)")
    parser.add_argument("--option-sets", nargs="+", default=["diamonds", "flights"],
                        help="regression sets of the kl_columns part")
    parser.add_argument("--option-epochs", type=int, default=10,
                        help="epochs on diamonds in those parts (half as many on flights, twice its size)")
    parser.add_argument("--kl-gammas", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--columns", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--no-exact", action="store_true", help="kl_columns: only the sampled runs")
    parser.add_argument("--sets", nargs="+", default=["magic", "ring"])
    parser.add_argument("--class-gamma", type=int, default=512)
    parser.add_argument("--class-epochs", type=int, default=15)
    args = parser.parse_args()

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.pop("command", None)
    def option(name, value):
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            return flag if value else ""
        return f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"

    results.setdefault("commands", {})[" ".join(args.parts)] = "python benchmarks/bench_orth_decoupled.py " + " ".join(
        filter(None, (option(k, v) for k, v in vars(args).items() if v is not None)))
    X, Xt, y, yt = load_diamonds()

    def save():
        # After every part: a long run that fails late keeps what it measured.
        RESULTS.write_text(json.dumps(results, indent=2, default=float))

    if "steps" in args.parts:
        results["steps"] = part_steps(X, y, args)
        for name, r in results["steps"].items():
            print(f"{name:28s} {r['median_step_ms']:8.1f} ms", flush=True)
        save()
    equal_m = args.equal_m
    if equal_m is None and "steps" in results:
        target = results["steps"][f"orth_{N_BETA}+{N_GAMMA}"]["median_step_ms"]
        coupled = {int(k.split("_")[1]): v["median_step_ms"] for k, v in results["steps"].items()
                   if k.startswith("coupled_")}
        equal_m = min(coupled, key=lambda m: abs(coupled[m] - target))
    parts = {
        "diamonds": lambda: part_diamonds(X, y, Xt, yt, args, equal_m or 256),
        "init": lambda: part_init(X, y, Xt, yt, args),
        "kl_columns": lambda: part_kl_columns(args),
        "classify": lambda: part_classify(args),
    }
    for name, run in parts.items():
        if name in args.parts:
            results[name] = run()
            save()

if __name__ == "__main__":
    main()
