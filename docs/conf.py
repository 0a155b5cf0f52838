"""Sphinx configuration of the skgp_sparse documentation.

Why Sphinx (and not mkdocs-material + mkdocstrings): our docstrings are numpydoc, which
Sphinx renders natively through ``numpydoc`` (parameter tables, cross-references to
scikit-learn); the pages are plain Markdown read by ``myst-parser``; ``sphinx-gallery``
turns the scripts in ``examples/`` into pages with their figures. All of it installs from
PyPI as pure-Python wheels and builds with no network access (``intersphinx`` is not used
for that reason), so CI can build it with warnings as errors
(``tests/test_docs.py``: ``sphinx-build -W -b html docs <tmp>``).

Environment variables
---------------------
SKGP_DOCS_RUN_EXAMPLES
    A regular expression of example file names that sphinx-gallery executes (their figures
    appear in the pages). Default ``plot_bases_1d``: only the figure the user guide shows.
    ``.*`` runs them all (a minute or two); the others are rendered as code only.
"""

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the package of this checkout, also when not installed

import skgp_sparse  # noqa: E402

project = "skgp_sparse"
author = "skgp_sparse developers"
copyright = "skgp_sparse developers, BSD-3-Clause"
version = release = skgp_sparse.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip"]

# Top-level pages that the index does not name (docs/scaling.md from the streaming/Dask
# work, any later page) are added to its table of contents where the index has the marker
# line, so a new page needs no edit here; pages of the bases (docs/bases/<name>.md) enter
# through the glob of bases.md.
OPTIONAL_PAGES_MARKER = "% other pages are inserted here by conf.py"


def _insert_other_pages(app, docname, source):
    if docname != root_doc:
        return
    text = source[0]
    named = {line.strip() for line in text.splitlines()}
    others = sorted(
        page.stem for page in DOCS.glob("*.md") if page.stem not in named and page.stem != root_doc
    )
    source[0] = text.replace(OPTIONAL_PAGES_MARKER, "\n".join(others))


def setup(app):
    app.connect("source-read", _insert_other_pages)

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# numpydoc: the parameter tables come from the docstrings; members are listed by the API
# page itself (no autosummary stubs to generate).
numpydoc_show_class_members = False
numpydoc_validation_checks = set()
autodoc_default_options = {"member-order": "bysource"}

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": os.environ.get("SKGP_DOCS_RUN_EXAMPLES", "plot_bases_1d"),
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "reset_modules": ("matplotlib",),
    "write_computation_times": False,
    "show_signature": False,
}
# The examples shrink their data when this is set (each documents it): the docs build
# only needs their pictures, not their timings.
os.environ.setdefault("SKGP_EXAMPLES_QUICK", "1")

html_theme = "alabaster"
html_theme_options = {
    "description": "Sparse variational GPs as scikit-learn estimators",
    "fixed_sidebar": True,
    "page_width": "1100px",
}
html_static_path = []
html_show_sourcelink = False
