"""Where a training step's time goes, phase by phase, for the bases on diamonds.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/profile_bases.py
    python benchmarks/profile_bases.py --models coupled:256 orth_decoupled:128+1024 --steps 50
    python benchmarks/profile_bases.py --module before=/tmp/orth_decoupled_old.py \\
        --models coupled:256 before:128+1024 orth_decoupled:128+1024

A step is what :func:`skgp_sparse.optim.loop.train` does with one minibatch (batch 1024 by
default), split into the phases a basis is responsible for:

- ``marginals``: ``basis.marginals(..., need_grad=True)`` (kernel matrices, their
  derivative closures, the forward pass);
- ``likelihood``: the expected log-likelihood and its adjoints (the same for every basis);
- ``kl``: ``basis.kl_divergence`` with the tape;
- ``backward``: ``basis.backward`` (every gradient Adam uses);
- ``natural``: ``basis.natural_step``;
- ``adam``: the Adam update and storing the new parameters.

The models are interleaved step by step in one process (so that a change of load on a
shared machine hits them all alike) and each phase is reported as a median over the
steps, with the ratio of the whole step to the first model's. The clock is the thread's
CPU time by default (``--clock cpu``): with one BLAS and numba thread all the work is on
that thread, and time spent descheduled by other jobs on a busy machine does not count;
``--clock wall`` for wall-clock time. ``--module name=path``
loads another version of a basis from a file (for before/after comparisons in one
process); ``name:...`` in ``--models`` then refers to it. Its ``init_state`` is called with
the positional arguments only.
"""

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import load_diamonds  # noqa: E402

from skgp_sparse import SparseGPRegressor  # noqa: E402
from skgp_sparse.bases import BASES  # noqa: E402
from skgp_sparse.optim import Adam, NaturalStepSchedule  # noqa: E402
from skgp_sparse._estimators._common import resolve_kernel  # noqa: E402

PHASES = ("marginals", "likelihood", "kl", "backward", "natural", "adam")


def load_module(name, path):
    """A basis module from a file, imported as a sibling of the package's bases (so that
    its relative imports resolve)."""
    spec = importlib.util.spec_from_file_location(f"skgp_sparse.bases._profiled_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_model(text, modules):
    """``basis:M`` or ``basis:M+M2``, optionally ``;key=value`` init options
    (e.g. ``orth_decoupled:128+1024;kl_columns=64``)."""
    spec, *opts = text.split(";")
    name, sizes = spec.split(":")
    m, _, m2 = sizes.partition("+")
    options = {}
    for opt in opts:
        key, value = opt.split("=")
        options[key] = None if value == "None" else (int(value) if value.lstrip("-").isdigit() else value)
    basis = modules[name] if name in modules else BASES[name]
    return dict(label=text, basis=basis, m=int(m), m2=int(m2 or 0), options=options)


class Profiled:
    """One model and its optimisers, stepped phase by phase."""

    def __init__(self, cfg, X, y, batch, seed, clock=time.thread_time):
        rng = np.random.default_rng(seed)
        Z0 = X[np.sort(rng.choice(X.shape[0], cfg["m"] + cfg["m2"], replace=False))]
        # The estimator builds the model (noise, jitter, fields) exactly as fit does.
        reg = SparseGPRegressor(basis="coupled", batch_size=batch, random_state=seed)
        kernel = resolve_kernel(None, X.shape[1])
        basis = cfg["basis"]
        state = basis.init_state(Z0, 1, 1, cfg["m2"], **cfg["options"])
        model = reg._build_model(kernel, state, X.shape[0])
        model.basis = basis
        model.learn_fields = tuple(basis.ADAM_FIELDS) + tuple(basis.INDUCING_FIELDS)
        self.model, self.label = model, cfg["label"]
        self.schedule = NaturalStepSchedule(reg.natural_step_size, conjugate=True, full_batch=False)
        self.adam = Adam(reg.learning_rate)
        self.times = {p: [] for p in PHASES}
        self.clock = clock

    def step(self, xb, yb, record):
        model, basis = self.model, self.model.basis
        clock = [self.clock()]

        def lap(phase):
            now = self.clock()
            if record:
                self.times[phase].append(now - clock[0])
            clock[0] = now

        scale = model.n_data / xb.shape[0]
        mean, var, tape = basis.marginals(model.kernel, xb, model.state, model.jitter, True)
        model.jitter = max(model.jitter, tape.jitter)
        lap("marginals")
        lik = model.likelihood
        ell, d_mean, d_var = lik.expected_log_lik(yb, mean, var)
        d_mean, d_var = scale * d_mean, scale * np.asarray(d_var)
        d_log_noise = scale * float(lik.d_log_noise(yb, mean, var).sum())
        lap("likelihood")
        kl = basis.kl_divergence(model.kernel, model.state, model.jitter, tape)
        lap("kl")
        theta_bar, bars = basis.backward(tape, model.state, d_mean, d_var, model.learn_fields)
        grads = {"theta": theta_bar, **bars}
        d_log_noise = model.noise.scatter_gradient(d_log_noise, theta_bar)
        if d_log_noise is not None and model.noise.learned:
            grads["log_noise"] = np.array([d_log_noise])
        lap("backward")
        new_state, _ = self.schedule.apply(lambda size: basis.natural_step(tape, model.state, d_mean, d_var, size))
        lap("natural")
        new_params = self.adam.step(model.adam_params(), grads, model.adam_bounds())
        model.state = new_state
        model.set_adam_params(new_params)
        lap("adam")
        return scale * float(ell.sum()) - kl

    def summary(self):
        med = {p: 1e3 * float(np.median(t)) for p, t in self.times.items()}
        total = [1e3 * sum(parts) for parts in zip(*self.times.values())]
        med["step"] = float(np.median(total))
        return med


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+",
                        default=["coupled:256", "coupled:128", "orth_decoupled:128+1024", "solve:128+128"])
    parser.add_argument("--module", action="append", default=[], help="name=path of another basis version")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    modules = {}
    for item in args.module:
        name, path = item.split("=", 1)
        modules[name] = load_module(name, path)
    X, _, y, _ = load_diamonds()
    Y = y.reshape(-1, 1)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    runs = [Profiled(parse_model(text, modules), X, y, args.batch, seed=0, clock=clock) for text in args.models]
    rng = np.random.default_rng(1)
    for s in range(args.warmup + args.steps):
        rows = np.sort(rng.choice(X.shape[0], args.batch, replace=False))
        for run in runs:
            run.step(X[rows], Y[rows], record=s >= args.warmup)
    table = {run.label: run.summary() for run in runs}
    ref = table[runs[0].label]["step"]
    print(f"{'model':40s} " + " ".join(f"{p:>10s}" for p in PHASES + ("step",)) + f" {'ratio':>7s}")
    for label, med in table.items():
        print(f"{label:40s} " + " ".join(f"{med[p]:10.2f}" for p in PHASES + ("step",))
              + f" {med['step'] / ref:7.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
