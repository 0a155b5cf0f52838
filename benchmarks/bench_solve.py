"""SOLVE-GP benchmark: basis="solve" against the coupled basis, natural steps against Adam.

Sections (all in this one process, the compared fits interleaved, same data, same seed):

* ``diamonds``: solve(128 + 128) against coupled(256) and coupled(128): test RMSE, NLPD,
  fit time and the exact training ELBO after every epoch; solve also with
  variational_optimizer="adam" (the paper's training) for ELBO against time; and the two
  ways of splitting the k-means centres into Z and O (farthest-point "spread", the
  default, against "first": the first M centres), with the conditioning of C_vv.
* ``steps``: median seconds per training step of the three models.
* ``magic``: SparseGPClassifier on KEEL magic, coupled(128), solve(128 + 128), coupled(256).

    python benchmarks/bench_solve.py                   # everything, about 10 minutes on 2 busy cores
    python benchmarks/bench_solve.py --only steps

Results: benchmarks/results/solve.json and benchmarks/results/solve_elbo.png.
"""

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import gaussian_nlpd, load_diamonds, load_keel, rmse
from _ours import time_our_step

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import solve

RESULTS = Path(__file__).parent / "results" / "solve.json"
FIGURE = Path(__file__).parent / "results" / "solve_elbo.png"
BATCH = 1024

REGRESSION_MODELS = {
    "coupled(128)": dict(basis="coupled", n_inducing=128),
    "solve(128+128)": dict(basis="solve", n_inducing=128, n_orthogonal=128),
    "coupled(256)": dict(basis="coupled", n_inducing=256),
    "solve(128+128), adam": dict(basis="solve", n_inducing=128, n_orthogonal=128, variational_optimizer="adam"),
}


def first_split(points, n_orthogonal):
    """The plain split: the first M k-means centres are Z, the rest O."""
    n_z = points.shape[0] - n_orthogonal
    return points[:n_z], points[n_z:]


def residual_conditioning(est):
    """Condition number of C_vv and the smallest distance from an O point to a Z point
    (in units of the fitted length scales) of a fitted solve model."""
    from skgp_sparse.kernels import compile_kernel

    st = est.variational_state_
    kernel = compile_kernel(est.kernel_, white_as_noise=True)
    Z, O = st.inducing, st.orthogonal
    Kuu = kernel(Z)
    Kuu = Kuu + est.jitter_ * np.mean(np.diag(Kuu)) * np.eye(len(Z))
    Kuv = kernel(Z, O)
    Cvv = kernel(O) - Kuv.T @ np.linalg.solve(Kuu, Kuv)
    ls = np.exp(kernel.theta[1:]) if kernel.theta.size > 1 else 1.0
    dist = np.sqrt(np.min(np.sum(((O[:, None] - Z[None]) / ls) ** 2, -1)))
    return float(np.linalg.cond(Cvv)), float(dist), float(st.residual_jitter)


def fit_with_curve(est, X, y, threads):
    """Fit, recording (training seconds, exact training ELBO per row) after every epoch;
    the ELBO evaluation is excluded from the clock."""
    curve, paused = [], [0.0]
    Y = ((y - y.mean()) / y.std()).reshape(-1, 1)

    def on_epoch(model, history):
        entered = time.perf_counter()
        curve.append((entered - start - paused[0], model.elbo(X, Y) / X.shape[0]))
        paused[0] += time.perf_counter() - entered

    est._epoch_callback = on_epoch
    with threadpool_limits(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - start - paused[0]
    del est._epoch_callback
    return fit_s, curve


def diamonds(epochs, threads):
    X, Xt, y, yt = load_diamonds()
    rows = []
    runs = list(REGRESSION_MODELS.items()) + [("solve(128+128), first split", dict(
        basis="solve", n_inducing=128, n_orthogonal=128, split="first"))]
    for name, params in runs:
        params = dict(params)
        split = params.pop("split", "spread")
        original = solve.split_inducing
        if split == "first":
            solve.split_inducing = first_split
        try:
            reg = SparseGPRegressor(batch_size=BATCH, max_iter=epochs, tol=0.0, n_iter_no_change=10**6, random_state=0,
                                    **params)
            fit_s, curve = fit_with_curve(reg, X, y, threads)
        finally:
            solve.split_inducing = original
        mean, std = reg.predict(Xt, return_std=True)
        row = dict(model=name, epochs=reg.n_iter_, fit_s=fit_s, rmse=rmse(yt, mean),
                   nlpd=gaussian_nlpd(yt, mean, std**2), elbo_per_row=curve[-1][1], curve=curve,
                   noise=reg.noise_variance_)
        if params["basis"] == "solve":
            row["cond_cvv"], row["min_dist_o_z"], row["residual_jitter"] = residual_conditioning(reg)
        rows.append(row)
        print({k: v for k, v in row.items() if k != "curve"}, flush=True)
    return rows


def step_times(n_steps, threads, repeats=3):
    X, _, y, _ = load_diamonds()
    y = (y - y.mean()) / y.std()
    rng = np.random.default_rng(0)
    Z256 = np.array(X[np.sort(rng.choice(X.shape[0], 256, replace=False))])
    configs = {
        "coupled(128)": (Z256[::2], dict(basis="coupled")),
        "solve(128+128)": (Z256, dict(basis="solve", n_orthogonal=128)),
        "coupled(256)": (Z256, dict(basis="coupled")),
        "solve(128+128), adam": (Z256, dict(basis="solve", n_orthogonal=128, variational_optimizer="adam")),
    }
    timings = {name: [] for name in configs}
    for _ in range(repeats):  # interleaved; the best median of each counts
        for name, (Z0, params) in configs.items():
            with threadpool_limits(threads), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                timings[name].append(time_our_step(X, y, Z0, BATCH, n_steps, **params))
    base = min(timings["coupled(256)"])
    rows = [dict(model=name, step_ms=1e3 * min(t), ratio_vs_coupled256=min(t) / base) for name, t in timings.items()]
    for r in rows:
        print(r, flush=True)
    return rows


def magic(epochs, threads):
    from sklearn.metrics import accuracy_score, log_loss

    X, Xt, y, yt = load_keel("magic")
    rows = []
    for name, params in list(REGRESSION_MODELS.items())[:3]:
        clf = SparseGPClassifier(batch_size=BATCH, max_iter=epochs, random_state=0, **params)
        with threadpool_limits(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            clf.fit(X, y)
            fit_s = time.perf_counter() - start
        proba = clf.predict_proba(Xt)
        rows.append(dict(model=name, epochs=clf.n_iter_, fit_s=fit_s,
                         accuracy=accuracy_score(yt, clf.classes_[proba.argmax(axis=1)]),
                         log_loss=log_loss(yt, proba, labels=clf.classes_), backoffs=clf.n_natural_backoffs_,
                         elbo_per_row=clf.loss_curve_[-1] / X.shape[0]))
        print(rows[-1], flush=True)
    return rows


def figure(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for r in rows:
        if r["model"].endswith("first split"):
            continue
        t, e = zip(*r["curve"])
        ax.plot(t, e, marker="o", ms=3, label=r["model"])
    ax.set_xlabel("training seconds (shared 2-core machine)")
    ax.set_ylabel("training ELBO per row (nats)")
    ax.set_title("diamonds, batch 1024: ELBO after each epoch")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["diamonds", "steps", "magic"])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--magic-epochs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["machine"] = dict(platform=platform.platform(), threads=args.threads,
                              note="shared 2-core machine; timings are noisy, compare within a run only")
    if args.only in (None, "diamonds"):
        results["diamonds"] = diamonds(args.epochs, args.threads)
        results["diamonds_command"] = f"python benchmarks/bench_solve.py --only diamonds --epochs {args.epochs}"
        figure(results["diamonds"])
    if args.only in (None, "steps"):
        results["steps"] = step_times(args.steps, args.threads)
    if args.only in (None, "magic"):
        results["magic"] = magic(args.magic_epochs, args.threads)
    RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
