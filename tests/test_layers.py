"""The package's layers (docs/design.md, "Layers"): backend.py at the bottom, dense linear
algebra right above it, and no import cycle anywhere.

``backend.py`` holds namespaces, devices and conversions only: it must import neither
:mod:`skgp_sparse.linalg` nor :mod:`skgp_sparse.likelihoods` (the special functions live
beside the likelihoods), and stay small enough to read at one sitting.
"""

import ast
import pathlib
import subprocess
import sys
import textwrap

import skgp_sparse

PACKAGE = pathlib.Path(skgp_sparse.__file__).parent
#: The most lines backend.py may have (issue 24: "at most about 600").
BACKEND_MAX_LINES = 600


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph():
    """Module -> the package's modules it imports (at any depth of its source, lazy
    imports included). A package's ``__init__`` runs before any of its modules, so an
    import of a module's own parent package is not an edge; ``from pkg import mod``
    names the module ``pkg.mod``, not ``pkg``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                candidates = submodules if len(submodules) == len(node.names) else [target, *submodules]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            imported.update(c for c in candidates if c in modules and c != name and not name.startswith(c + "."))
        graph[name] = imported
    return graph


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _modules_loaded_by(module):
    """The package's modules in ``sys.modules`` after importing ``module`` in a fresh
    interpreter, with the package's ``__init__`` (which imports everything) replaced
    by an empty package on the same path."""
    code = textwrap.dedent(
        f"""
        import importlib, sys, types
        package = types.ModuleType("skgp_sparse")
        package.__path__ = [{str(PACKAGE)!r}]
        sys.modules["skgp_sparse"] = package
        importlib.import_module({module!r})
        print("\\n".join(sorted(m for m in sys.modules if m.startswith("skgp_sparse."))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_backend_imports_neither_linalg_nor_likelihoods():
    imported = _import_graph()["skgp_sparse.backend"]
    assert not {m for m in imported if m.startswith(("skgp_sparse.linalg", "skgp_sparse.likelihoods"))}, imported
    # What a fresh import actually loads, not only what the source says.
    assert _modules_loaded_by("skgp_sparse.backend") == {"skgp_sparse.backend"}


def test_linalg_sits_on_backend_alone():
    loaded = _modules_loaded_by("skgp_sparse.linalg")
    assert {m for m in loaded if not m.startswith("skgp_sparse.linalg")} == {"skgp_sparse.backend"}, loaded


def test_backend_is_small():
    n_lines = len((PACKAGE / "backend.py").read_text(encoding="utf-8").splitlines())
    assert n_lines <= BACKEND_MAX_LINES, n_lines


def test_no_import_cycle():
    graph = _import_graph()
    assert "skgp_sparse.linalg" in graph["skgp_sparse.bases.coupled"]  # the graph sees imports
    assert _cycles(graph) == []


def test_the_fit_imports_nothing_of_the_estimators():
    """The fit pipeline (skgp_sparse/fit/) sits below the scikit-learn layer: it reads
    plain values (settings, rows, a model), never an estimator module."""
    graph = _import_graph()
    fit_modules = [name for name in graph if name == "skgp_sparse.fit" or name.startswith("skgp_sparse.fit.")]
    assert "skgp_sparse.fit.pipeline" in fit_modules
    upward = {(name, m) for name in fit_modules for m in graph[name] if m.startswith("skgp_sparse._estimators")}
    assert upward == set(), upward
