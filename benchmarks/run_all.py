"""Reproduce the benchmark report, docs/benchmarks.md, with one command.

``TABLES`` lists every table of the report, in its order, with the command that produced it.
``run_all.py`` runs them one after the other, each in its own process against this checkout's
package, then draws the figures of test metric against training time and writes a Markdown
summary:

    python benchmarks/run_all.py --list     # every table's command, nothing run
    python benchmarks/run_all.py            # all of them: many hours on 2 cores
    python benchmarks/run_all.py --only bench_classification bench_binary_classification
    python benchmarks/run_all.py --quick    # smoke run: each script once with --quick (results/quick/)
    python benchmarks/run_all.py --only bench_regression --no-run   # redraw from saved JSON

A full run rewrites (or appends to) the files under ``benchmarks/results/`` that the report
cites, ``results/figures/*.png`` and ``results/report.md``. Where the report compares today's
code with an older commit, or keeps no results file, the command runs today's side and writes
under a temporary folder, so that no cited file changes meaning. The GPU tables run only with
``--gpu``. ``--other-pages`` adds the scripts behind the bases' pages and docs/scaling.md.
``--quick`` never overwrites measured results; a script without a ``--quick`` option is skipped
by a quick run (and says so). The exit status is non-zero if any command failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
R = "benchmarks/results/"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
ASYMPTOTE = "--asymptote-epochs 200 --asymptote-steps 8000"
SEVEN_SETS = "ring twonorm spambase magic banana phoneme nasscds"
SMALL_SETS = "australian bands bupa heart ionosphere mammographic monk-2 pima sonar titanic wdbc wisconsin"
MANY_CLASS_SETS = "letter penbased satimage optdigits texture segment vowel vehicle movement_libras"


def table(section, script, args="", env=None, needs=None):
    """One command of the report: ``args`` is split on spaces unless given as a list;
    ``{scratch}`` and ``{root}`` are filled in at run time."""
    return {"section": section, "script": script, "args": args.split() if isinstance(args, str) else args,
            "env": env or {}, "needs": needs}


def report_tables():
    t = []
    section = "Default settings: the regressor against its asymptote and GPyTorch"
    t += [table(section, "bench_defaults", "--only sets --sets storms diamonds simdat movies ripples friedman1 "
                f"weather flights txhousing {ASYMPTOTE}"),
          table(section, "bench_defaults", f"--only sets --sets txhousing computers gapminder storms {ASYMPTOTE}")]
    t += [table("Default settings: against exact GaussianProcessRegressor", "bench_defaults", "--only fullbatch")]
    section = "Default settings: the classifier against its asymptote"
    t += [table(section, "bench_defaults", f"--only sets --sets magic ring twonorm banana phoneme spambase {ASYMPTOTE} "
                f"--threads 1 --no-peer --out {R}defaults_sets_classification_binary.json"),
          table(section, "bench_defaults", f"--only sets --sets ring twonorm spambase {ASYMPTOTE} --threads 1 --no-peer "
                f"--out {R}defaults_sets_classification_wide.json"),
          table(section, "bench_defaults", f"--only sets --sets magic ring twonorm banana phoneme spambase penbased "
                f"satimage {ASYMPTOTE} --threads 1 --out {R}defaults_sets_classification_eight_sets.json")]
    t += [table("The exact search that starts a fit", "bench_search_rows",
                "--sets weather storms diamonds txhousing movies --rows 0 1024 2048 4096")]
    section = "The search's second stage"
    t += [table(section, "bench_search_rows", "--sets weather storms diamonds --rows 0 2048 --without-inducing-stage "
                f"--out {R}search_stages.json"),
          table(section, "bench_search_rows", "--sets weather flights storms diamonds --rows --inducing-iterations "
                f"100 300 600 --out {R}search_iterations.json"),
          table(section, "bench_search_rows", "--sets gapminder computers txhousing --rows --inducing-iterations "
                f"50 90 300 --seeds 0 1 2 --out {R}search_small_sets.json"),
          table(section, "bench_search_rows", "--sets gapminder computers weather --n-train 3000 --rows "
                f"--inducing-iterations 44 100 300 --seeds 0 1 --out {R}search_small_sets.json")]
    t += [table("The default kernel", "bench_default_kernel", "--threads 1")]
    t += [table("One batch or the stream", "bench_full_batch_rows", "--sets txhousing weather storms diamonds simdat "
                f"--rows 2048 4096 6412 8192 --out {R}full_batch_rows_matern.json")]
    t += [table("The stopping rule's sample and the ridge", "bench_many_classes",
                ["--sets", "letter", "penbased", "satimage", "segment", "vehicle", "--ours", "default={}",
                 "--out", "{scratch}/stopping_rule_many_classes.jsonl"])]
    t += [table("Accuracy and fit time; time per training step; prediction", "bench_regression")]
    t += [table("Likelihoods and kernels", "bench_likelihoods"), table("Likelihoods and kernels", "bench_kernels")]
    t += [table("The bases side by side", "bench_bases", "--budget 40")]
    t += [table("float32 on the CPU", "bench_float32")]
    section = "GPU: CuPy and PyTorch CUDA against GPyTorch"
    t += [table(section, "bench_gpu", "--only steps --repeats 2 --n-steps 10 --warmup 2 --cpu-steps 5", needs="gpu"),
          table(section, "bench_gpu", "--only defaults", needs="gpu"),
          # PyTorch's steps go to results/gpu.json too; the report keeps them as gpu_torch.json.
          table(section, "bench_gpu", "--library torch --only steps --repeats 1 --n-steps 10 --warmup 2 "
                "--cpu-max-m 0", needs="gpu")]
    section = "Where the classifier stands"
    for s in range(10):
        t += [table(section, "bench_binary_classification", f"--sets ring twonorm spambase --warm-up --split-seed {s} "
                    f"--out {R}binary_classification_wide_split{s}.json")]
    for s in range(10):
        t += [table(section, "bench_binary_classification",
                    f"--warm-up --split-seed {s} --out {R}binary_classification_split{s}.json")]
    t += [table(section, "bench_many_classes", ["--sets", "letter", "penbased", "satimage", "optdigits", "--ours",
                                                "default={}", "--peers", "--out", f"{R}many_classes_four_sets.jsonl"])]
    section = "Every basis on five sets"
    t += [table(section, "bench_classification"), table(section, "bench_classification", "--time-to-accuracy")]
    section = "The Bayes rate of ring and twonorm"
    t += [table(section, "bench_bayes_rule", "--set ring --seeds 0 1 2 3 4"),
          table(section, "bench_bayes_rule", "--set twonorm --seeds 0 1 2 3 4 5 6 7 8 9 --no-ours")]
    for s in range(10):
        t += [table(section, "bench_classifier_search_variants",
                    f"--sets twonorm --variants linear --split-seed {s} --seed-from-split")]
    section = "The classifier's step against GPyTorch's"
    t += [table(section, "bench_classifier_steps", f"--out {R}classifier_steps_shared.json"),
          table(section, "bench_classifier_steps", f"--class-covariance per_class --out {R}classifier_steps_per_class.json")]
    t += [table("The binary search on Gaussian pseudo-observations", "bench_binary_search_routes",
                f"--out {R}binary_search_routes_rounds4.jsonl")]
    for s in range(3):
        t += [table("Each round's q from the pseudo-model's optimum", "bench_classifier_search_variants",
                    f"--variants base --split-seed {s} --out {{scratch}}/pseudo_start.jsonl")]
    t += [table("The binary classifier's stream from the search's q(u)", "bench_many_class_search",
                "--sets ring twonorm spambase magic banana phoneme --rows 100000 --checkouts {root} "
                "--out {scratch}/stream_from_search_q.json")]
    for s in range(3):
        t += [table("The inducing inputs' rate after the search", "bench_classifier_search_variants",
                    f"--variants base inducing_rate_full inducing_rate_01 --split-seed {s} "
                    f"--out {R}classifier_inducing_rate.jsonl")]
    section = "A learned constant in the binary classifier's default kernel"
    for s in range(5):
        t += [table(section, "bench_classifier_search_variants", f"--variants bias no_bias --sets {SEVEN_SETS} "
                    f"--split-seed {s} --out {R}classifier_bias_kernel_seven_sets.jsonl"),
              table(section, "bench_classifier_search_variants", f"--variants bias no_bias --sets {SMALL_SETS} "
                    f"--split-seed {s} --out {R}classifier_bias_kernel_small_sets.jsonl")]
    for s in range(5):
        t += [table("One length scale on wide binary data", "bench_classifier_search_variants",
                    f"--variants bias isotropic --split-seed {s} --sets {SEVEN_SETS} {SMALL_SETS} "
                    f"--out {R}classifier_shared_length_scale.jsonl")]
    t += [table("Many classes with one covariance", "bench_many_classes",
                ["--sets", *MANY_CLASS_SETS.split(), "--ours", 'robustmax={"likelihood":"robustmax"}',
                 'softmax={"likelihood":"softmax"}',
                 'robustmax_per_class={"likelihood":"robustmax","class_covariance":"per_class"}',
                 "--peers", "--out", f"{R}many_classes.jsonl"])]
    t += [table("Inducing inputs placed class by class", "bench_many_classes",
                ["--sets", *MANY_CLASS_SETS.split(), "--ours", "default, interleaved={}", "--out", f"{R}many_classes.jsonl"])]
    t += [table("The many-class fit without the exact search", "bench_many_class_search",
                "--sets penbased letter twonorm ring magic --checkouts {root} --out {scratch}/many_class_search.json")]
    section = "Several outputs: the LMC against GPyTorch"
    for s in range(3):
        t += [table(section, "bench_multioutput", f"--methods ours-lmc --sets txhousing weather --threads 1 "
                    f"--random-state {s} --out {R}multioutput_lmc_rs{s}.json")]
    t += [table(section, "bench_multioutput", "--methods ours-lmc --sets txhousing weather economics airquality "
                f"--threads 1 --random-state 0 --out {R}multioutput_lmc_timing.json")]
    for s in range(3):
        t += [table(section, "bench_multioutput", f"--methods ours-lmc gpytorch-lmc --sets weather --threads 1 "
                    f"--random-state {s} --out {R}multioutput_paired_weather_rs{s}.json")]
    t += [table(section, "bench_multioutput", "--methods ours-lmc gpytorch-lmc --sets txhousing --threads 1 "
                f"--random-state 0 --out {R}multioutput_paired_txhousing_rs0.json"),
          table(section, "bench_multioutput", "--methods ours-lmc gpytorch-lmc --sets economics airquality --threads 1 "
                f"--random-state 0 --out {R}multioutput_economics_airquality_rs0.json"),
          table(section, "bench_multioutput", "--steps 500"),  # every method, the exact LMC GP included
          table(section, "bench_multioutput", "--methods ours-independent gpytorch-independent --sets weather "
                f"--threads 1 --random-state 0 --out {R}multioutput_independent_weather_rs0.json")]
    section = "The noise floor under n_latent; one search for a one-batch LMC fit"
    for name, seeds in (("economics", range(6)), ("weather", range(3))):
        for s in seeds:
            for floor in ([], ["--noise-floor", "1e-4"]):
                tag = "1e-4" if floor else "default"
                t += [table(section, "bench_multioutput", ["--methods", "ours-lmc", "--sets", name, "--threads", "1",
                                                           "--random-state", str(s), *floor, "--out",
                                                           f"{{scratch}}/noise_floor_{tag}_{name}_rs{s}.json"])]
    for s in range(3):
        t += [table("An LMC stream's search and its cap", "lmc_stream_trajectory",
                    f"--set weather --epochs 30 --random-state {s}", env=ONE_THREAD)]
    t += [table("Multiscale windows against points, M = 16 to 128", "bench_inducing_features", "--part multiscale"),
          table("Fourier features on large low-dimensional sets", "bench_inducing_features", "--part fourier"),
          table("The fit's time after the pass does not grow with the rows", "bench_inducing_features",
                "--part scaling")]
    return t


def other_pages_tables():
    """The scripts behind docs/bases/*.md and docs/scaling.md (``--other-pages``)."""
    return [table("docs/bases/orth_decoupled.md", "bench_orth_decoupled"),
            table("docs/bases/solve.md", "bench_solve", "--epochs 6"),
            table("docs/bases/inverse_free.md", "bench_inverse_free", env=ONE_THREAD),
            table("docs/bases/inverse_free.md", "bench_inverse_free", "--ablation", env=ONE_THREAD),
            table("docs/scaling.md", "bench_limits")]


def command_line(entry, scratch="{scratch}"):
    args = [a.replace("{scratch}", str(scratch)).replace("{root}", str(ROOT)) for a in entry["args"]]
    return [sys.executable, str(HERE / f"{entry['script']}.py"), *args]


def shown(entry):
    env = " ".join(f"{k}={v}" for k, v in entry["env"].items())
    args = " ".join(repr(a) if (" " in a or "{" in a and "scratch" not in a) else a for a in entry["args"])
    return " ".join(part for part in (env, f"python benchmarks/{entry['script']}.py", args) if part)


def run_command(entry, scratch):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "MPLBACKEND": "Agg", **entry["env"]}
    print(f"== [{entry['section']}] {shown(entry)}", flush=True)
    start = time.perf_counter()
    code = subprocess.call(command_line(entry, scratch), cwd=ROOT, env=env)
    print(f"== exit {code} after {time.perf_counter() - start:.0f} s", flush=True)
    return "ok" if code == 0 else f"failed ({code})"


def run_quick(script):
    path = HERE / f"{script}.py"
    if "--quick" not in path.read_text():
        print(f"== {path.name}: no --quick option, skipped in a quick run", flush=True)
        return "skipped"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "MPLBACKEND": "Agg"}
    print(f"== {path.name} --quick", flush=True)
    start = time.perf_counter()
    code = subprocess.call([sys.executable, str(path), "--quick"], cwd=ROOT, env=env)
    print(f"== {path.name}: exit {code} after {time.perf_counter() - start:.0f} s", flush=True)
    return "ok" if code == 0 else f"failed ({code})"


def curve_figures(results_dir):
    """Test metric against training seconds, one panel per data set; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures_dir = results_dir / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    written = []
    panels = []
    regression = results_dir / "regression.json"
    if regression.exists():
        rows = [r for r in json.loads(regression.read_text()).get("accuracy", []) if r.get("curve")]
        for dataset in sorted({r["dataset"] for r in rows}):
            panels.append((f"regression_{dataset}", dataset, "test RMSE (standardised)", "rmse",
                           [r for r in rows if r["dataset"] == dataset], True))
    classification = results_dir / "classification.json"
    if classification.exists():
        rows = [r for r in json.loads(classification.read_text()).get("rows", []) if r.get("curve")]
        for name in dict.fromkeys(r["set"] for r in rows):
            panels.append((f"classification_{name}", name, "test accuracy", "accuracy",
                           [r for r in rows if r["set"] == name], False))
    for stem, title, ylabel, key, rows, log_y in panels:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for r in rows:
            seconds = [t for t, _ in r["curve"]]
            values = [m[key] for _, m in r["curve"]]
            ax.plot(seconds, values, marker=".", label=r.get("model") or r.get("label"))
        ax.set_xlabel("training time (s), evaluation excluded")
        ax.set_ylabel(ylabel)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = figures_dir / f"{stem}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def report(results_dir, statuses, figures):
    lines = ["# Benchmark results", "", f"Generated by `python benchmarks/run_all.py` on {time.strftime('%Y-%m-%d')}; "
             "a shared 2-core machine, so timings move by 10-20% between runs.", ""]
    lines += ["| command | status |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in statuses.items()] + [""]
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    regression = results_dir / "regression.json"
    if regression.exists():
        import bench_regression

        lines += ["## Regression", "", bench_regression.markdown(json.loads(regression.read_text())), ""]
    classification = results_dir / "classification.json"
    if classification.exists():
        import bench_classification

        rows = json.loads(classification.read_text())["rows"]
        lines += ["## Classification", "", "| set | model | accuracy | log-loss | fit s | epochs |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['set']} | {r['label']} | {r['accuracy']:.4f} | {r['log_loss']:.4f} | {r['fit_s']:.1f} | "
                  f"{r['epochs']} |" for r in rows]
        lines += ["", "### Beside the orthogonally decoupled paper (Salimbeni et al. 2018, Tables 5 and 6)", "",
                  bench_classification.paper_table(rows), ""]
    if figures:
        lines += ["## Test metric against training time", ""]
        lines += [f"![{f.stem}](figures/{f.name})" for f in figures]
    path = results_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every table's command and exit")
    parser.add_argument("--quick", action="store_true", help="smoke run of each script once; results/quick/")
    parser.add_argument("--only", nargs="+", help="script names (without .py) whose commands to run")
    parser.add_argument("--gpu", action="store_true", help="also the GPU tables (needs CUDA, CuPy and torch)")
    parser.add_argument("--other-pages", action="store_true", help="also the bases' pages and docs/scaling.md")
    parser.add_argument("--no-run", action="store_true", help="only redraw figures and the report")
    args = parser.parse_args()
    entries = report_tables() + (other_pages_tables() if args.other_pages else [])
    if args.only:
        entries = [e for e in entries if e["script"] in args.only]
    if args.list:
        for e in entries:
            print(f"[{e['section']}]{' (GPU)' if e['needs'] == 'gpu' else ''}\n    {shown(e)}")
        return 0
    results_dir = HERE / "results" / ("quick" if args.quick else "")
    if args.no_run:
        statuses = {shown(e): "not run: redrawn from its saved results" for e in entries}
    elif args.quick:
        statuses = {script: run_quick(script) for script in dict.fromkeys(e["script"] for e in entries)}
    else:
        scratch = Path(tempfile.mkdtemp(prefix="skgp_benchmarks_"))
        print(f"results the report does not keep: {scratch}", flush=True)
        statuses = {}
        for e in entries:
            if e["needs"] == "gpu" and not args.gpu:
                statuses[shown(e)] = "skipped: a GPU table (--gpu)"
                continue
            statuses[shown(e)] = run_command(e, scratch)
    figures = curve_figures(results_dir)
    path = report(results_dir, statuses, figures)
    print(f"report: {path}; figures: {', '.join(f.name for f in figures) or 'none'}")
    failed = [k for k, v in statuses.items() if v.startswith("failed")]
    if failed:
        print("failed:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
