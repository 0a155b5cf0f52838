"""The documentation site builds offline with warnings as errors (what CI checks).

A docstring that numpydoc cannot parse, a broken cross-reference, an image that is not
drawn or a page outside every table of contents fails this test.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "SKGP_EXAMPLES_QUICK": "1"}
    env.pop("SKGP_DOCS_RUN_EXAMPLES", None)  # the default: run only the figure the guide shows
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(out), "-d", str(tmp_path / "doctrees")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    # The pages are there, the API reference was generated from the docstrings, and the
    # figure of the bases was drawn by the gallery.
    for page in ("index", "user_guide", "bases", "api", "benchmarks", "design", "auto_examples/index"):
        assert (out / f"{page}.html").is_file(), page
    api = (out / "api.html").read_text()
    for text in ("SparseGPRegressor", "SparseGPClassifier", "n_orthogonal", "predict_proba"):
        assert text in api, text
    assert list((out / "_images").glob("sphx_glr_plot_bases_1d_001.png"))
    for page in (ROOT / "docs").glob("*.md"):  # every top-level page is reachable from the index
        assert f'href="{page.stem}.html"' in (out / "index.html").read_text() or page.stem == "index", page


def test_every_shared_paragraph_is_filled_in():
    """Both estimators' docstrings name the shared paragraphs of ``_estimators/_docs.py`` with
    ``%(name)s`` markers: none is left unfilled (the regressor's once were, unnoticed, when a
    decorator moved to another class), and every parameter is described."""
    from skgp_sparse import SparseGPClassifier, SparseGPRegressor

    for estimator in (SparseGPRegressor, SparseGPClassifier):
        assert "%(" not in estimator.__doc__, estimator.__name__
        for name in estimator().get_params():
            assert f"\n    {name} : " in estimator.__doc__, (estimator.__name__, name)
