"""Every script in examples/ runs to the end and saves its figure.

Each runs in a subprocess in a fresh directory with ``SKGP_EXAMPLES_QUICK=1`` (smaller data,
fewer epochs, as every example documents), against this checkout's package.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_examples_are_found():
    names = {p.name for p in EXAMPLES}
    assert {"quickstart.py", "plot_bases_1d.py", "plot_classification.py", "plot_grid_search.py",
            "plot_large_flights.py", "plot_save_load.py", "plot_multioutput.py", "plot_fourier_features.py"} <= names


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_saves_a_figure(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "SKGP_EXAMPLES_QUICK": "1"}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = list(tmp_path.glob("*.png"))
    assert figures, f"{script.name} saved no figure"
    assert all(f.stat().st_size > 10_000 for f in figures)  # a drawn figure, not an empty canvas
