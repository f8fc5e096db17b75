"""The package's layers, read from the source's imports (module level and inside functions). From the bottom up:
the model (``simt_pto/``), the kernels (``kernels/``), the runtime (``simt_pto.host``) and
the tools (``simt_pto.host.tools``: the coalescing analyzer, ``inspect``, selftest, the demo, the command line):

* the model imports no kernel, no tile op and no host module;
* the package root imports only the model at import time: the runtime and the tools it re-exports (``gather``,
  ``mgather``, ``coalescing``, ...) are imported inside its module ``__getattr__``, on first access, and named
  for type checkers by the same imports under ``if TYPE_CHECKING:``, which never run;
* the tile ops (``simt_pto.host.tile_ops``) forward to the one host entry point, ``simt_pto.host.dispatch`` (never
  to a kernel), and take their options as the typed call of ``simt_pto.call``;
* two public modules of ``simt_pto/`` re-export the runtime, and are no part of the model: ``simt_pto.dask`` (the
  Dask route) and ``simt_pto.ops`` (the tile ops' old path, deprecated); nothing in the package imports either;
* ``kernels/`` imports no tile op and no host module, and no target (``cpu``, ``a2a3``, ``a5``) imports another;
* no module of the core (model, kernels, runtime) imports a tool;
* no module but the root imports the package root ``simt_pto`` itself (each imports the submodule it needs);
* there is no import cycle;
* no two modules share a name (but the per-target mirrors ``mgather`` / ``mscatter``), and none shadows a module
  of the standard library;
* ``ruff check`` passes; and, against a regular (non-editable) install, the same layers hold as import-linter
  contracts (``[tool.importlinter]`` in pyproject.toml).
"""
from __future__ import annotations

import ast
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"simt_pto": ROOT / "simt_pto", "simt_pto.kernels": ROOT / "kernels", "simt_pto.host": ROOT / "host"}
TARGETS = ("simt_pto.kernels.cpu", "simt_pto.kernels.a2a3", "simt_pto.kernels.a5")


def _modules() -> dict:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def imports_of(name: str, path: Path, nodes=None) -> set:
    """The package modules ``name`` imports (in ``nodes``, default: all of its source): ``from pkg import sub`` is
    an import of ``pkg.sub``, not of ``pkg``."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())) if nodes is None else nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


TOOLS = "simt_pto.host.tools"


def _is_tool(name):
    return name == TOOLS or name.startswith(TOOLS + ".")


PUBLIC_REEXPORTS = ("simt_pto.dask", "simt_pto.ops")
"""The modules of ``simt_pto/`` that re-export the runtime for users at their import (no part of the model)."""


def _is_model(name):
    return (name.startswith("simt_pto.") and name not in PUBLIC_REEXPORTS
            and not name.startswith(("simt_pto.kernels", "simt_pto.host")))


def _below_the_model(name):
    return name in PUBLIC_REEXPORTS or name.startswith(("simt_pto.kernels", "simt_pto.host"))


def test_the_model_imports_no_kernel_no_tile_op_and_no_host_module():
    wrong = {(m, i) for m in GRAPH if _is_model(m) for i in GRAPH[m] if _below_the_model(i)}
    assert not wrong, sorted(wrong)


def _is_type_checking(node) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): a block that type checkers read and Python never runs."""
    test = node.test if isinstance(node, ast.If) else None
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _top_level_imports(path: Path) -> list:
    """The import statements of a module that run when it is imported (outside any function or class body, and
    outside ``if TYPE_CHECKING:``)."""
    out = []

    def visit(nodes):
        for child in nodes:
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            elif _is_type_checking(child):
                visit(child.orelse)
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                visit(ast.iter_child_nodes(child))
    visit(ast.parse(path.read_text()).body)
    return out


def _type_checking_imports(path: Path) -> list:
    """The import statements under ``if TYPE_CHECKING:``."""
    return [node for block in ast.walk(ast.parse(path.read_text())) if _is_type_checking(block)
            for stmt in block.body for node in ast.walk(stmt) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _bound_names(imports) -> set:
    return {alias.asname or alias.name.split(".")[0] for node in imports for alias in node.names}


def test_the_root_imports_the_runtime_and_the_tools_only_in_its_lazy_re_exports():
    """The runtime and the tools appear in the root twice, with the same modules: inside ``__getattr__`` (the
    lazy re-exports) and under ``if TYPE_CHECKING:`` (their types, for a type checker); never at import time."""
    path = MODULES["simt_pto"]
    tree = ast.parse(path.read_text())
    eager = imports_of("simt_pto", path, _top_level_imports(path))
    assert not {m for m in eager if _below_the_model(m)}, sorted(eager)
    getattr_ = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
    lazy = imports_of("simt_pto", path, ast.walk(getattr_))
    below = {m for m in GRAPH["simt_pto"] if _below_the_model(m)}
    assert below == lazy, (sorted(below), sorted(lazy))
    assert {"simt_pto.host.tile_ops", "simt_pto.host.whole_array", "simt_pto.host.in_memory",
            "simt_pto.host.tools.coalescing"} <= lazy
    typed = _type_checking_imports(path)
    assert imports_of("simt_pto", path, typed) == lazy
    public = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and node.targets[0].id == "__all__")
    # a type checker sees every public name: the lazy ones through the TYPE_CHECKING imports, none as Any
    assert _bound_names(typed) == set(public) - _bound_names(_top_level_imports(path))


def test_the_tile_ops_forward_to_host_dispatch_and_import_no_kernel():
    below = {i for i in GRAPH["simt_pto.host.tile_ops"] if i.startswith(("simt_pto.kernels", "simt_pto.host"))}
    assert below == {"simt_pto.host.dispatch"}, sorted(below)


def test_nothing_in_the_package_imports_the_public_reexports():
    wrong = {(m, i) for m in GRAPH if m not in ("simt_pto", *PUBLIC_REEXPORTS) for i in GRAPH[m] if i in PUBLIC_REEXPORTS}
    assert not wrong, sorted(wrong)


def test_kernels_import_no_tile_op_no_host_module_and_no_other_target():
    wrong = set()
    for m in GRAPH:
        if not m.startswith("simt_pto.kernels"):
            continue
        own = next((t for t in TARGETS if m == t or m.startswith(t + ".")), None)
        for i in GRAPH[m]:
            other = next((t for t in TARGETS if i == t or i.startswith(t + ".")), None)
            if i.startswith("simt_pto.host") or i in PUBLIC_REEXPORTS or (other is not None and other != own):
                wrong.add((m, i))
    assert not wrong, sorted(wrong)


def test_the_core_imports_no_tool():
    assert any(_is_tool(m) for m in MODULES), "no tools package found"
    wrong = {(m, i) for m in GRAPH if m != "simt_pto" and not _is_tool(m) for i in GRAPH[m] if _is_tool(i)}
    assert not wrong, sorted(wrong)


STDLIB = set(sys.stdlib_module_names)


def test_module_names_say_one_thing():
    """One module per name, except the per-target mirrors ``mgather`` / ``mscatter`` (the point of the layout) and the
    two tuning tables, the host's and the kernels' (``host/tuning.py``, ``kernels/tuning.py``: the kernels may not
    import the host), and no name of the standard library (``host/inspect.py`` once shadowed ``inspect``)."""
    by_name = {}
    for name in MODULES:
        path = MODULES[name]
        if path.name != "__init__.py":
            by_name.setdefault(path.stem, []).append(name)
    shared = {stem: sorted(names) for stem, names in by_name.items()
              if len(names) > 1 and stem not in ("mgather", "mscatter")
              and not (stem == "tuning" and sorted(names) == ["simt_pto.host.tuning", "simt_pto.kernels.tuning"])}
    assert not shared, shared
    assert not sorted(stem for stem in by_name if stem in STDLIB)


def test_only_the_root_imports_the_package_root():
    wrong = sorted(m for m in GRAPH if m != "simt_pto" and "simt_pto" in GRAPH[m])
    assert not wrong, wrong


def _cycles(graph) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(sys.executable).parent)) is None, reason="ruff not installed")
def test_ruff_check_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    out = subprocess.run([ruff, "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@functools.cache
def regular_install(base: Path) -> Path:
    """The package installed as a regular (non-editable) install into ``base / "regular-install" / "site"``, once
    per process and base folder (tests/test_typing.py shares it). import-linter and mypy cannot see the packages
    an editable install maps; a regular install into a folder can. It is built from a copy of the package's
    sources: a build from the tree itself would pick up the modules left in its ``build/`` folder by an earlier
    build (moved or deleted ones too), and concurrent runs would share that folder."""
    work = base / "regular-install"
    source, site = work / "source", work / "site"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for folder in PACKAGES.values():
        shutil.copytree(folder, source / folder.relative_to(ROOT), ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--target", str(site), str(source)], check=True, capture_output=True, timeout=300,
                   cwd=work)
    assert (site / "simt_pto" / "host" / "tools" / "cli.py").is_file()
    assert (site / "simt_pto" / "py.typed").is_file()
    return site


@pytest.mark.skipif(shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None,
                    reason="import-linter not installed")
def test_import_linter_contracts_hold_on_a_regular_install(tmp_path_factory):
    site = regular_install(tmp_path_factory.getbasetemp())
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    env = {"PYTHONPATH": str(site), "PATH": str(Path(sys.executable).parent)}
    out = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True, cwd=site,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 6 kept, 0 broken." in out.stdout
