"""basis="inverse_free" against basis="coupled" on diamonds (short runs, shared 2-core machine).

    python benchmarks/bench_inverse_free.py [--epochs 20] [--step-sizes 256,1024,2048]

Sections: (1) fits at M=256, batch 1024, same initial inducing inputs: test RMSE/NLPD and
ELBO per epoch against wall time (png); (2) median step time of both bases for each M,
interleaved in this process (coupled, inverse_free, coupled, ...), as ratios.
Results: benchmarks/results/inverse_free.json and inverse_free_elbo.png.
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from _data import gaussian_nlpd, init_inducing, load_diamonds, rmse
from _ours import time_our_step

OUT = Path(__file__).parent / "results"


def fit(basis, X, y, Xt, yt, Z0, epochs, learn_inducing=True):
    from skgp_sparse import SparseGPRegressor

    # n_iter_no_change=epochs: both run the same number of epochs (no early stop).
    reg = SparseGPRegressor(basis=basis, n_inducing=len(Z0), inducing_init=Z0, batch_size=1024,
                            max_iter=epochs, n_iter_no_change=epochs, random_state=0, learn_inducing=learn_inducing)
    trace = []
    start = time.perf_counter()
    reg._epoch_callback = lambda model, history: trace.append(
        (time.perf_counter() - start, history.elbo[-1] / X.shape[0], history.diagnostics[-1] if history.diagnostics else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(X, y)
    fit_s = time.perf_counter() - start
    mean, std = reg.predict(Xt, return_std=True)
    row = dict(basis=basis, learn_inducing=learn_inducing, epochs=reg.n_iter_, fit_s=fit_s, rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2),
               final_elbo_per_row=trace[-1][1], noise=reg.noise_variance_, kernel=str(reg.kernel_),
               trace=[dict(t=t, elbo_per_row=e, **d) for t, e, d in trace])
    print({k: v for k, v in row.items() if k != "trace"}, flush=True)
    return row


def step_times(X, y, args):
    """Median step time of both bases per M, interleaved (coupled, inverse_free, coupled, ...)."""
    steps = []
    for m in (int(s) for s in args.step_sizes.split(",")):
        Zm = init_inducing(X, m, random_state=0)
        n_steps = 5 if m <= 1024 else 3
        times = {"coupled": [], "inverse_free": []}
        for _ in range(args.rounds):
            for basis in times:
                times[basis].append(time_our_step(X, y, Zm, 1024, n_steps, n_warmup=1, basis=basis))
        row = dict(M=m, coupled_s=float(np.median(times["coupled"])), inverse_free_s=float(np.median(times["inverse_free"])))
        row["ratio"] = row["inverse_free_s"] / row["coupled_s"]
        steps.append(row)
        print(row, flush=True)
    return steps


def plot(fits):
    """ELBO per row against epochs and against wall time, one line per fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for row in fits:
        label = row["basis"] + ("" if row.get("learn_inducing", True) else ", Z fixed")
        style = "o-" if row.get("learn_inducing", True) else "s--"
        elbo = [p["elbo_per_row"] for p in row["trace"]]
        axes[0].plot(range(1, len(elbo) + 1), elbo, style, label=label)
        axes[1].plot([p["t"] for p in row["trace"]], elbo, style, label=label)
    for ax, xlabel in zip(axes, ("epoch", "wall time (s), shared 2-core machine: noisy")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("epoch-mean ELBO per row")
        ax.set_ylim(-1.5, 1.0)
        ax.legend()
    fig.suptitle("diamonds, M=256, batch 1024")
    fig.tight_layout()
    fig.savefig(OUT / "inverse_free_elbo.png", dpi=90)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--step-sizes", default="256,1024,2048")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only-steps", action="store_true", help="redo the step times, keep the stored fits")
    args = parser.parse_args()
    X, Xt, y, yt = load_diamonds(random_state=0)
    if args.only_steps:
        stored = json.loads((OUT / "inverse_free.json").read_text())
        stored["step_times"] = step_times(X, y, args)
        stored["step_command"] = f"python benchmarks/bench_inverse_free.py --only-steps --rounds {args.rounds}"
        (OUT / "inverse_free.json").write_text(json.dumps(stored, indent=1))
        plot(stored["fits"])
        return
    Z0 = init_inducing(X, 256, random_state=0)
    fits = [fit(b, X, y, Xt, yt, Z0, args.epochs) for b in ("coupled", "inverse_free")]
    ref, ours = fits
    # Same, Z fixed: isolates the effect of Adam moving Z under the likelihood parameterisation.
    fits += [fit(b, X, y, Xt, yt, Z0, args.epochs, learn_inducing=False) for b in ("coupled", "inverse_free")]
    summary = dict(rmse_ratio=ours["rmse"] / ref["rmse"], nlpd_diff=ours["nlpd"] - ref["nlpd"],
                   rmse_ratio_fixed_z=fits[3]["rmse"] / fits[2]["rmse"], nlpd_diff_fixed_z=fits[3]["nlpd"] - fits[2]["nlpd"])
    print(summary, flush=True)

    steps = step_times(X, y, args)
    OUT.mkdir(exist_ok=True)

    (OUT / "inverse_free.json").write_text(json.dumps(dict(fits=fits, summary=summary, step_times=steps,
                                                           command=f"python benchmarks/bench_inverse_free.py --epochs {args.epochs}",
                                                           machine="shared 2-core CPU, float64"), indent=1))
    plot(fits)


if __name__ == "__main__":
    main()
