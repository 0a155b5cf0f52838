"""basis="inverse_free" against basis="coupled" on diamonds at M = 256, batch 1024.

    python benchmarks/bench_inverse_free.py                  # the table row and the RMSE curves
    python benchmarks/bench_inverse_free.py --ablation       # the 2026 recipe, one piece at a time
    python benchmarks/bench_inverse_free.py --rows 20000 --epochs 40 --ablation   # a shortened run
    python benchmarks/bench_inverse_free.py --seeds 1,2      # other initial inducing rows and batch orders

Every fit starts from the same 256 training rows as inducing inputs, with the estimators'
default settings (stopping rule included) unless ``--epochs`` fixes the number of epochs.
A run fits coupled(256) first, as the reference of the same run, then inverse_free(256)
(``--ablation``: one fit per variant of :data:`VARIANTS`). For each fit it records test
RMSE and NLPD, epochs, steps, wall time and milliseconds per training step (the per-epoch
test evaluation is excluded from the clock), and the test RMSE and NLPD after every epoch. Step
times of both bases measured alone, interleaved (coupled, inverse_free, coupled, ...),
follow at the sizes of ``--step-sizes``.

Results: ``benchmarks/results/inverse_free.json`` and ``inverse_free_rmse.png`` (test RMSE
against epochs and against training time), or ``inverse_free_ablation.json`` with
``--ablation``; ``--rows``, ``--epochs`` and ``--seeds`` add ``_rows<N>``, ``_epochs<N>`` and
``_seeds`` to the names.
"""

import argparse
import contextlib
import functools
import json
import sys
import warnings
from pathlib import Path

import numpy as np

# Runnable from anywhere without installing the package (run_all.py sets PYTHONPATH alike).
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from _data import gaussian_nlpd, init_inducing, load_diamonds, rmse
from _ours import fit_with_curve, time_our_step

OUT = Path(__file__).parent / "results"
M = 256
BATCH = 1024

#: The ablation: each variant adds (or removes) one piece, as init_state options of the
#: inverse_free basis. The first is the landed recipe in today's code: the 2022 mean
#: parameterisation (q_mean is mu), at most 4 factor steps of T per evaluation (tol 1e-3),
#: inducing inputs at Adam's full rate. The last two take one piece out of the defaults.
VARIANTS = [
    ("2022 mean, T <= 4 steps", dict(preconditioned_mean=False, t_max_iter=4, inducing_rate_scale=1.0)),
    ("+ inner T loop (<= 50 steps, tol 1e-3)", dict(preconditioned_mean=False, inducing_rate_scale=1.0)),
    ("+ mean preconditioned through T", dict(inducing_rate_scale=1.0)),
    ("+ Z frozen for 200 steps", dict(inducing_warmup_steps=200, inducing_rate_scale=1.0)),
    ("+ Z at 0.1 x learning rate", dict(inducing_warmup_steps=200)),
    ("- Z warm-up (the defaults)", dict()),
    ("defaults, Sigma_0 = 1e-4 mean(diag K)", dict(sigma_init=1e-4)),
    # Leave one piece out of the defaults.
    ("defaults without the preconditioned mean", dict(preconditioned_mean=False)),
    ("defaults with T <= 4 steps per evaluation", dict(t_max_iter=4)),
]


@contextlib.contextmanager
def inverse_free_options(options):
    """The estimators' inverse_free states made with these init_state options."""
    from skgp_sparse.bases import inverse_free

    original = inverse_free.init_state
    inverse_free.init_state = functools.partial(original, **options)
    try:
        yield
    finally:
        inverse_free.init_state = original


def fit(name, basis, data, Z0, epochs, options=None, seed=0):
    """One fit with the test RMSE and NLPD after every epoch; returns the result row."""
    from skgp_sparse import SparseGPRegressor

    X, Xt, y, yt = data
    settings = dict(basis=basis, n_inducing=len(Z0), inducing_init=Z0, batch_size=BATCH, random_state=seed)
    if epochs:
        # n_iter_no_change=epochs: exactly that many epochs, no early stop.
        settings.update(max_iter=epochs, n_iter_no_change=epochs)
    reg = SparseGPRegressor(**settings)

    def evaluate(model, estimator):
        mean, var = model.predictor().latent(model.kernel, Xt)
        mean = mean[:, 0] * estimator._y_train_std[0] + estimator._y_train_mean[0]
        var = var[:, 0] * estimator._y_train_std[0] ** 2 + estimator._y_train_std[0] ** 2 * model.noise.value
        return dict(rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, var))

    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(inverse_free_options(options or {}))
        fit_s, curve = fit_with_curve(reg, X, y, evaluate)
    mean, std = reg.predict(Xt, return_std=True)
    row = dict(
        name=name, basis=basis, seed=seed, options=options or {}, rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2),
        epochs=reg.n_iter_, steps=reg.n_steps_, fit_s=fit_s, ms_per_step=1000.0 * fit_s / reg.n_steps_,
        noise=float(reg.noise_variance_), kernel=str(reg.kernel_),
        diagnostics=reg.diagnostics_[-1] if getattr(reg, "diagnostics_", None) else {},
        curve=[dict(epoch=i + 1, t=t, **metrics) for i, (t, metrics) in enumerate(curve)],
    )
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k not in ("curve", "diagnostics")},
          flush=True)
    return row


def step_times(X, y, sizes, rounds):
    """Median step time of both bases per M, interleaved (coupled, inverse_free, coupled, ...).

    ``time_our_step`` builds the step as the estimators do, without the inducing-input
    schedule: Z moves at Adam's full rate, which costs the T loop a step more than in a fit.
    """
    rows = []
    for m in sizes:
        Zm = init_inducing(X, m, random_state=0)
        n_steps = 20 if m <= 512 else 5
        times = {"coupled": [], "inverse_free": []}
        for _ in range(rounds):
            for basis in times:
                times[basis].append(time_our_step(X, y, Zm, BATCH, n_steps, n_warmup=20, basis=basis))
        row = dict(M=m, coupled_s=float(np.median(times["coupled"])), inverse_free_s=float(np.median(times["inverse_free"])))
        row["ratio"] = row["inverse_free_s"] / row["coupled_s"]
        rows.append(row)
        print(row, flush=True)
    return rows


def plot(fits, path, title):
    """Test RMSE against epochs and against training time, one line per fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for row in fits:
        style = "k-" if row["basis"] == "coupled" else "-"
        epochs = [p["epoch"] for p in row["curve"]]
        values = [p["rmse"] for p in row["curve"]]
        axes[0].plot(epochs, values, style, label=row["name"])
        axes[1].plot([p["t"] for p in row["curve"]], values, style, label=row["name"])
    for ax, xlabel in zip(axes, ("epoch", "training time (s), shared CPU")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test RMSE")
        ax.set_ylim(0.09, 0.2)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ablation", action="store_true", help="fit every variant of VARIANTS")
    parser.add_argument("--rows", type=int, default=None, help="train on the first ROWS training rows only")
    parser.add_argument("--epochs", type=int, default=None, help="fixed number of epochs (default: stopping rule)")
    parser.add_argument("--step-sizes", default="256", help="M values of the interleaved step timing ('' for none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds: each refits every model")
    args = parser.parse_args()

    X, Xt, y, yt = load_diamonds(random_state=0)
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    data = (X, Xt, y, yt)
    variants = VARIANTS if args.ablation else [("inverse_free (defaults)", {})]
    fits = []
    for seed in (int(s) for s in args.seeds.split(",")):
        # The seed draws the initial inducing rows and the minibatches; both bases share them.
        Z0 = init_inducing(X, M, random_state=seed)
        ref = fit("coupled", "coupled", data, Z0, args.epochs, seed=seed)
        runs = [fit(name, "inverse_free", data, Z0, args.epochs, options, seed) for name, options in variants]
        for row in runs:
            row["rmse_ratio"] = row["rmse"] / ref["rmse"]
            row["nlpd_diff"] = row["nlpd"] - ref["nlpd"]
            row["step_ratio"] = row["ms_per_step"] / ref["ms_per_step"]
        fits += [ref] + runs
    sizes = [int(s) for s in args.step_sizes.split(",") if s]
    steps = step_times(X, y, sizes, args.rounds) if sizes else []

    command = "python benchmarks/bench_inverse_free.py" + (" --ablation" if args.ablation else "")
    command += f" --rows {args.rows}" if args.rows else ""
    command += f" --epochs {args.epochs}" if args.epochs else ""
    command += f" --seeds {args.seeds}" if args.seeds != "0" else ""
    suffix = ("_ablation" if args.ablation else "") + (f"_rows{args.rows}" if args.rows else "")
    suffix += (f"_epochs{args.epochs}" if args.epochs else "") + ("_seeds" if args.seeds != "0" else "")
    OUT.mkdir(exist_ok=True)
    result = dict(command=command, data=f"diamonds, {X.shape[0]} training rows, {Xt.shape[0]} test rows",
                  M=M, batch_size=BATCH, machine="shared 2-core CPU, float64, OMP_NUM_THREADS as set by the caller",
                  fits=fits, step_times=steps)
    (OUT / f"inverse_free{suffix}.json").write_text(json.dumps(result, indent=1))
    plot([row for row in fits if row["seed"] == fits[0]["seed"]], OUT / f"inverse_free{suffix}_rmse.png",
         f"diamonds ({X.shape[0]} rows), M={M}, batch {BATCH}")
    print(f"{'fit':42s} {'seed':>4s} {'RMSE':>7s} {'ratio':>6s} {'NLPD':>7s} {'epochs':>6s} {'ms/step':>8s}")
    for row in fits:
        print(f"{row['name']:42s} {row['seed']:4d} {row['rmse']:7.4f} {row.get('rmse_ratio', 1.0):6.3f} "
              f"{row['nlpd']:7.3f} {row['epochs']:6d} {row['ms_per_step']:8.1f}")


if __name__ == "__main__":
    main()
