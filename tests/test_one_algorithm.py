"""The algorithm layer is written once, over ``xp``: no function of it serves one array library.

The bases, the ELBO, the optimisers and the likelihoods call the primitives
(:mod:`skgp_sparse.linalg`, :mod:`skgp_sparse.backend`, the likelihoods' special functions),
which hold numpy's fast path and the Array API version side by side. This test imports every
module of the algorithm layer and reads the source of every function and method it defines:
none may ask which library an array belongs to (``is_numpy``, ``is_foreign``,
``isinstance(..., np.ndarray)``, ``xp is np``), and none may be a twin kept for one library
(an ``xp_``/``_xp_`` name, an ``_inplace`` numba kernel, a numba-compiled function).
"""

import ast
import importlib
import inspect
import pkgutil
import re
import textwrap

import pytest

import skgp_sparse

#: The algorithm layer: every module of these packages, and these modules.
ALGORITHM_PACKAGES = ("skgp_sparse.bases", "skgp_sparse.optim", "skgp_sparse.likelihoods")
ALGORITHM_MODULES = ("skgp_sparse.elbo",)
#: Primitive modules that live beside the algorithms they serve: the likelihoods' special
#: functions (a per-library branch is their job).
PRIMITIVE_MODULES = {"skgp_sparse.likelihoods._special"}

#: A question about which library an array belongs to.
LIBRARY_QUESTIONS = (
    re.compile(r"\bis_numpy\s*\("),
    re.compile(r"\bis_foreign\s*\("),
    re.compile(r"isinstance\((?:[^()]|\([^()]*)*?\bnp\.ndarray"),
    re.compile(r"\bis\s+(not\s+)?np\b"),
    re.compile(r"\bnp\s+is\s+(not\s+)?\w"),
)
TWIN_NAME = re.compile(r"^_?xp_|_inplace$")


def algorithm_modules():
    names = list(ALGORITHM_MODULES)
    for package_name in ALGORITHM_PACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        names += [f"{package_name}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
    return sorted(set(names) - PRIMITIVE_MODULES)


def functions_of(module):
    """(qualified name, source) of every function and method defined in the module's file."""
    source = inspect.getsource(module)
    tree = ast.parse(source)
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(tree, "")
    return [(name, textwrap.dedent(ast.get_source_segment(source, node))) for name, node in found], tree


def test_the_algorithm_layer_is_found():
    modules = algorithm_modules()
    for expected in ("skgp_sparse.bases.coupled", "skgp_sparse.bases.solve", "skgp_sparse.bases.inverse_free",
                     "skgp_sparse.bases.orth_decoupled", "skgp_sparse.elbo", "skgp_sparse.optim.adam",
                     "skgp_sparse.likelihoods.poisson"):
        assert expected in modules


@pytest.mark.parametrize("module_name", algorithm_modules())
def test_no_function_serves_one_array_library(module_name):
    module = importlib.import_module(module_name)
    functions, tree = functions_of(module)
    problems = []
    for name, source in functions:
        short = name.rsplit(".", 1)[-1]
        if TWIN_NAME.search(short):
            problems.append(f"{name}: a name kept for one array library")
        if re.search(r"@\s*(numba\.)?n?jit\b", source):
            problems.append(f"{name}: numba-compiled (numpy only): a primitive's job")
        for pattern in LIBRARY_QUESTIONS:
            match = pattern.search(source)
            if match:
                problems.append(f"{name}: asks which library an array is ({match.group(0)!r})")
    # Module-level code too (a branch at import, a dispatch table).
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            segment = ast.get_source_segment(inspect.getsource(module), node) or ""
            for pattern in LIBRARY_QUESTIONS:
                if pattern.search(segment):
                    problems.append(f"module level: asks which library an array is ({segment[:60]!r})")
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_fork():
    """The patterns above find each idiom the layer once used (so the test can fail)."""
    forks = [
        "if be.is_numpy(xp):", "if not backend.is_foreign(a):", "if isinstance(h, np.ndarray):",
        "if not isinstance(a, (float, np.ndarray)):", "if xp is np:", "if backend.input_namespace(y) is not np:",
    ]
    for fork in forks:
        assert any(pattern.search(fork) for pattern in LIBRARY_QUESTIONS), fork
    assert TWIN_NAME.search("_xp_natural_step") and TWIN_NAME.search("a_adjoint_inplace")
    assert not any(pattern.search("xp = be.namespace(a, b)") for pattern in LIBRARY_QUESTIONS)
