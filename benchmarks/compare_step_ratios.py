"""Step-time ratios against GPyTorch of two checkouts, measured alternately in one run.

Answers "is our step time, relative to GPyTorch's, unchanged between revision A and
revision B?" on a shared machine, where absolute timings drift by 10-20% within minutes:
what is compared is the ratio ours / GPyTorch, which ``bench_regression.py --only steps``
measures with both libraries interleaved in one process, and the two checkouts are run
alternately (A B A B ...), so that a change of load hits both of them.

    python benchmarks/compare_step_ratios.py --baseline a1c914c          # vs this checkout
    python benchmarks/compare_step_ratios.py --baseline a1c914c --current HEAD \\
        --alternations 3 --grid 256:1024 1024:1024 --bases coupled solve orth_decoupled \\
        --threads 1 --n-steps 30 --repeats 2

Each measurement is a subprocess running the checkout's OWN ``benchmarks/bench_regression.py``
(its ``main()`` with ``--only steps --threads --n-steps --repeats``) with the checkout first on
``PYTHONPATH`` and as the working directory, so each imports its own ``skgp_sparse`` (the
module file each one imported is recorded and checked). ``bench_regression.py`` has no
option for the grid, the bases or the results path, so the subprocess imports it as a module
and, before calling its ``main()``, narrows three of its globals: the ``(M, batch)`` grid
that ``main`` hands to ``step_times`` (``--grid``), ``implemented_bases`` (``--bases``; the
coupled basis is always kept, ``step_times`` reports its ratios) and ``RESULTS_DIR`` (a
fresh temp folder per run, so the runs do not overwrite each other or
``benchmarks/results/regression.json``). Nothing else of the benchmark changes.

``--baseline`` and ``--current`` take a revision (checked out as a ``git worktree`` in a
temp folder, removed afterwards) or a directory (used as it is; ``--current`` defaults to
the checkout this script is in, uncommitted edits included). Thread pools are pinned with
``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``NUMBA_NUM_THREADS`` =
``--threads`` as well as by the benchmark's own ``threadpool_limits`` and
``torch.set_num_threads``.

Reported per (basis, M, batch, GPyTorch mode): the ratio ours / GPyTorch of each checkout
(median over the alternations; each alternation's value is ``step_times``' own: the best of
``--repeats`` interleaved medians), the change of that median in percent (negative: B is
faster relative to GPyTorch), the median of the paired per-alternation changes (each A run
against the B run right after it), and whether the change is within ``--tolerance``. Results:
``benchmarks/results/step_ratios.json`` (``--out``) and a Markdown table on stdout.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Runs inside the subprocess, in the checkout: its bench_regression.main() with the grid,
# the bases and the results folder narrowed. argv: results_dir grid_json bases_json threads n_steps repeats
_RUNNER = r"""
import json, sys
from pathlib import Path
results_dir, grid, bases, threads, n_steps, repeats = sys.argv[1:7]
grid = [tuple(g) for g in json.loads(grid)]
bases = json.loads(bases)
sys.argv = ["bench_regression.py", "--only", "steps", "--threads", threads, "--n-steps", n_steps,
            "--repeats", repeats]
import bench_regression as bench
import skgp_sparse
print("SKGP_SPARSE_FILE", skgp_sparse.__file__, flush=True)
step_times, implemented = bench.step_times, bench.implemented_bases
bench.step_times = lambda X, y, threads, n_steps, _grid, repeats=2: step_times(X, y, threads, n_steps, grid, repeats)
if bases:
    bench.implemented_bases = lambda: [b for b in implemented() if b in bases or b == "coupled"]
bench.RESULTS_DIR = Path(results_dir)
bench.main()
"""


def git(*args, cwd=REPO):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Checkout:
    """A directory holding the package: given, or a revision checked out as a temp worktree."""

    def __init__(self, spec, label):
        self.label, self.spec, self.worktree = label, spec, None
        if spec is None:
            self.path = REPO
        elif Path(spec).is_dir():
            self.path = Path(spec).resolve()
        else:
            sha = git("rev-parse", "--verify", f"{spec}^{{commit}}")
            self.worktree = Path(tempfile.mkdtemp(prefix=f"step_ratios_{label}_"))
            git("worktree", "add", "--detach", str(self.worktree), sha)
            self.path = self.worktree
        self.commit = git("rev-parse", "HEAD", cwd=self.path)
        self.dirty = bool(git("status", "--porcelain", "--untracked-files=no", cwd=self.path))

    def describe(self):
        return dict(label=self.label, spec=self.spec or "(this checkout)", path=str(self.path), commit=self.commit,
                    subject=git("log", "-1", "--format=%s", cwd=self.path)[:100],
                    uncommitted_edits=self.dirty, temp_worktree=self.worktree is not None)

    def remove(self):
        if self.worktree is not None:
            git("worktree", "remove", "--force", str(self.worktree))
            shutil.rmtree(self.worktree, ignore_errors=True)


def measure(checkout, grid, bases, args):
    """One bench_regression steps run in ``checkout``; returns its ``steps`` rows."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(checkout.path / "benchmarks"), str(checkout.path)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(args.threads)
    with tempfile.TemporaryDirectory(prefix="step_ratios_results_") as results_dir:
        cmd = [sys.executable, "-c", _RUNNER, results_dir, json.dumps(grid), json.dumps(bases),
               str(args.threads), str(args.n_steps), str(args.repeats)]
        proc = subprocess.run(cmd, cwd=checkout.path, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{checkout.label} run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        imported = next(line.split(" ", 1)[1] for line in proc.stdout.splitlines()
                        if line.startswith("SKGP_SPARSE_FILE "))
        if not Path(imported).resolve().is_relative_to(checkout.path):
            raise RuntimeError(f"{checkout.label} run imported skgp_sparse from {imported}, not {checkout.path}")
        return json.loads((Path(results_dir) / "regression.json").read_text())["steps"]


def ratios(rows):
    """{(basis, M, batch, mode): (ratio, ours_ms, gpytorch_ms)} from step_times' rows."""
    out = {}
    for r in rows:
        for basis, ours in r["bases_ms"].items():
            for mode in ("adam", "ngd"):
                peer = r[f"gpytorch_{mode}_ms"]
                out[(basis, r["M"], r["batch"], mode)] = (ours / peer, ours, peer)
    return out


def summarise(runs, order):
    """Per key: medians of each checkout over the alternations and the changes in percent."""
    keys = [k for k in runs["baseline"][0] if all(k in run for side in runs.values() for run in side)]
    keys.sort(key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1], k[2], k[3]))
    table = []
    for key in keys:
        row = dict(basis=key[0], M=key[1], batch=key[2], mode=key[3])
        for side in ("baseline", "current"):
            values = [run[key] for run in runs[side]]
            row[f"{side}_ratios"] = [v[0] for v in values]
            row[f"{side}_ratio"] = statistics.median(v[0] for v in values)
            row[f"{side}_ours_ms"] = statistics.median(v[1] for v in values)
            row[f"{side}_gpytorch_ms"] = statistics.median(v[2] for v in values)
        row["change_pct"] = 100 * (row["current_ratio"] / row["baseline_ratio"] - 1)
        paired = [100 * (c / b - 1) for b, c in zip(row["baseline_ratios"], row["current_ratios"])]
        row["paired_changes_pct"] = paired
        row["paired_change_pct"] = statistics.median(paired)
        table.append(row)
    return table


def markdown(table, tolerance):
    lines = ["| basis | M | batch | vs GPyTorch | ours ms (A / B) | ratio A | ratio B | change | paired change "
             f"| within {tolerance:g}% |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        ok = "yes" if abs(r["change_pct"]) <= tolerance else ("no (faster)" if r["change_pct"] < 0 else "**no (slower)**")
        lines.append(f"| {r['basis']} | {r['M']} | {r['batch']} | {r['mode'].upper() if r['mode'] == 'ngd' else 'Adam'} "
                     f"| {r['baseline_ours_ms']:.1f} / {r['current_ours_ms']:.1f} | {r['baseline_ratio']:.3f} "
                     f"| {r['current_ratio']:.3f} | {r['change_pct']:+.1f}% | {r['paired_change_pct']:+.1f}% | {ok} |")
    return "\n".join(lines)


def parse_grid(items):
    grid = []
    for item in items:
        M, batch = item.split(":")
        grid.append((int(M), int(batch)))
    return grid


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="revision (temp worktree) or directory: checkout A")
    parser.add_argument("--current", default=None,
                        help="revision (temp worktree) or directory: checkout B (default: this checkout as it is)")
    parser.add_argument("--alternations", type=int, default=3, help="A B rounds (A B A B ...)")
    parser.add_argument("--grid", nargs="+", default=["256:1024", "1024:1024"], metavar="M:BATCH")
    parser.add_argument("--bases", nargs="*", default=["coupled"],
                        help="bases timed (coupled always); none given: every basis of the checkout")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2, help="bench_regression's interleaved rounds per run")
    parser.add_argument("--tolerance", type=float, default=5.0, help="percent; marks the changes within it")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "step_ratios.json")
    args = parser.parse_args()
    grid = parse_grid(args.grid)

    checkouts = {}
    try:
        checkouts["baseline"] = Checkout(args.baseline, "baseline")
        checkouts["current"] = Checkout(args.current, "current")
        for side, c in checkouts.items():
            print(f"{side}: {c.commit[:10]} {c.path}{' (uncommitted edits)' if c.dirty else ''}", flush=True)
        runs = {"baseline": [], "current": []}
        raw = {"baseline": [], "current": []}
        start = time.perf_counter()
        for i in range(args.alternations):
            for side in ("baseline", "current"):
                t0 = time.perf_counter()
                rows = measure(checkouts[side], grid, args.bases, args)
                raw[side].append(rows)
                runs[side].append(ratios(rows))
                coupled = [f"M={r['M']} b={r['batch']}: {r['ratio_vs_adam']:.3f}/{r['ratio_vs_ngd']:.3f}" for r in rows]
                print(f"[{i + 1}/{args.alternations}] {side}: {time.perf_counter() - t0:.0f} s; "
                      f"coupled ours/Adam / ours/NGD: {'; '.join(coupled)}", flush=True)
        table = summarise(runs, order=["coupled", *args.bases])
        results = dict(
            meta=dict(machine=platform.platform(), cpu_count=os.cpu_count(), python=sys.version.split()[0],
                      date=time.strftime("%Y-%m-%dT%H:%M:%S"), wall_s=time.perf_counter() - start,
                      command=" ".join([Path(sys.executable).name, *sys.argv]), grid=grid, bases=args.bases,
                      threads=args.threads, n_steps=args.n_steps, repeats=args.repeats,
                      alternations=args.alternations, tolerance_pct=args.tolerance, dataset="diamonds",
                      ratio="ours / GPyTorch seconds per step; per run the best of `repeats` interleaved "
                            "medians (bench_regression.step_times); per checkout the median over alternations"),
            checkouts={side: c.describe() for side, c in checkouts.items()},
            table=table, raw_steps=raw)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=float))
        print()
        print(f"A = {checkouts['baseline'].commit[:7]}, B = {checkouts['current'].commit[:7]}"
              f"{' + uncommitted edits' if checkouts['current'].dirty else ''}; threads={args.threads}, "
              f"n_steps={args.n_steps}, repeats={args.repeats}, {args.alternations} alternations")
        print(markdown(table, args.tolerance))
        print(f"results: {args.out}")
    finally:
        for c in checkouts.values():
            c.remove()


if __name__ == "__main__":
    main()
