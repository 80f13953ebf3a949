"""The code's shape, for the redesigns' before/after figures: modules and lines per layer, the
modules over 800 lines, the longest functions and classes, import circles among our modules,
imports between layers (and any that climb back up), and the command line's imports past the
ledger layer.

Import circles are counted three ways: at import time (module-level imports; `TYPE_CHECKING`
blocks and imports inside functions do not run then), counting imports inside functions (a
circle hidden by a deferred import), and counting type-only imports too (every import a reader
must follow: the strictest, and what the `acyclic_siblings` import-linter contract forbids).

    python bench/structure.py                    # the working tree
    python bench/structure.py --root /tmp/old    # another checkout (before/after figures)
    python bench/structure.py --json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

PACKAGES = ("domain", "projections", "adapters", "ledger", "cli")  # lowest layer first
PREFIX = "release_ledger."  # the import package the layers are linked into
LONG = 60  # a function over this many lines is long
BIG = 800  # a module over this many lines is too big (the quality bar)


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts or "pytest_plugin" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _ours(module: str) -> str:
    """`release_ledger.domain.events` -> `domain.events` (the name bench figures use)."""
    return module.removeprefix(PREFIX)


def _imports(
    tree: ast.Module, name: str, known: set[str], deferred: bool = False, typing: bool = False
) -> set[str]:
    """Our modules this one imports when it is imported; with `deferred`, also those its
    functions import when they run; with `typing`, also those under `TYPE_CHECKING`."""
    out: set[str] = set()

    def add(node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            out.update(_ours(a.name) for a in node.names if _ours(a.name) in known)
        elif node.module and node.level == 0:
            module = _ours(node.module)
            submodules = {f"{module}.{a.name}" for a in node.names} & known
            out.update(submodules)
            # `from package import submodule` needs the submodule, not the package's body
            if module in known and len(submodules) < len(node.names):
                out.add(module)

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if deferred and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(node.body)
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if typing:
                    visit(node.body)
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                add(node)
            elif isinstance(node, ast.If | ast.Try) or (
                deferred and isinstance(node, ast.With | ast.For | ast.While)
            ):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _layer(module: str) -> str:
    return module.split(".")[0]


def _every_import(tree: ast.Module) -> list[str]:
    """Every module of ours an import statement anywhere in the module names (functions and
    `TYPE_CHECKING` blocks included), once per statement and module named."""
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [_ours(a.name) for a in node.names if a.name.startswith(PREFIX)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            named.append(_ours(node.module or ""))
    return named


def measure(root: Path) -> dict[str, object]:
    modules = _modules(root)
    known = set(modules)
    lines: dict[str, int] = {}
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str, int]] = []
    graphs: dict[str, dict[str, set[str]]] = {"import_time": {}, "deferred": {}, "typing": {}}
    crossings: dict[str, int] = {}
    climbs: list[str] = []
    cli_past_ledger: list[str] = []
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        lines[name] = text.count("\n")
        tree = ast.parse(text)
        graphs["import_time"][name] = _imports(tree, name, known)
        graphs["deferred"][name] = _imports(tree, name, known, deferred=True)
        graphs["typing"][name] = _imports(tree, name, known, deferred=True, typing=True)
        for node in ast.walk(tree):
            length = (getattr(node, "end_lineno", 0) or 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append((length, f"{name}.{node.name}"))
            elif isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                              for n in node.body)  # fmt: skip
                classes.append((length, f"{name}.{node.name}", methods))
        source = _layer(name)
        for target in _every_import(tree):
            layer = _layer(target)
            if layer not in PACKAGES or layer == source:
                continue
            crossings[f"{source} -> {layer}"] = crossings.get(f"{source} -> {layer}", 0) + 1
            if PACKAGES.index(layer) > PACKAGES.index(source):
                climbs.append(f"{name} -> {target}")
            if source == "cli" and layer != "ledger":
                cli_past_ledger.append(f"{name} -> {target}")
    functions.sort(reverse=True)
    classes.sort(reverse=True)
    per_package = {
        p: {"modules": sum(1 for n in lines if _layer(n) == p),
            "lines": sum(v for n, v in lines.items() if _layer(n) == p)}
        for p in PACKAGES
    }  # fmt: skip
    return {
        "modules": len(lines),
        "lines": sum(lines.values()),
        "per_package": per_package,
        f"modules_over_{BIG}_lines": sorted(
            ((n, v) for n, v in lines.items() if v > BIG), key=lambda kv: -kv[1]
        ),
        "largest_modules": sorted(lines.items(), key=lambda kv: -kv[1])[:10],
        f"functions_over_{LONG}_lines": sum(1 for length, _ in functions if length > LONG),
        "longest_functions": [(n, length) for length, n in functions[:10]],
        "longest_classes": [(n, length, methods) for length, n, methods in classes[:5]],
        "import_cycles": _cycles(graphs["import_time"]),
        "import_cycles_with_function_imports": _cycles(graphs["deferred"]),
        "import_cycles_with_type_only_imports": _cycles(graphs["typing"]),
        "layer_crossings": dict(sorted(crossings.items())),
        "imports_up_a_layer": sorted(climbs),
        "cli_imports_past_ledger": sorted(cli_past_ledger),
    }


def _print(figures: dict[str, object]) -> None:
    f: dict = figures  # type: ignore[type-arg]
    print(f"modules {f['modules']}, lines {f['lines']}")
    for package, counts in f["per_package"].items():
        print(f"  {package:<12} {counts['modules']:>3} modules {counts['lines']:>6} lines")
    big = f[f"modules_over_{BIG}_lines"]
    print(f"modules over {BIG} lines: {len(big)}")
    for name, count in big:
        print(f"  {count:>5}  {name}")
    print("largest modules:")
    for name, count in f["largest_modules"]:
        print(f"  {count:>5}  {name}")
    print(f"functions over {LONG} lines: {f[f'functions_over_{LONG}_lines']}")
    for name, length in f["longest_functions"]:
        print(f"  {length:>5}  {name}")
    print("longest classes (lines, methods):")
    for name, length, methods in f["longest_classes"]:
        print(f"  {length:>5}  {name} ({methods} methods)")
    for key, label in (
        ("import_cycles", "at import time"),
        ("import_cycles_with_function_imports", "counting imports inside functions"),
        ("import_cycles_with_type_only_imports", "counting type-only imports too"),
    ):
        print(f"import cycles {label}: {len(f[key])}")
        for cycle in f[key]:
            print("  " + " <-> ".join(cycle))
    crossings = f["layer_crossings"]
    print(f"imports between layers (statements, any depth): {sum(crossings.values())}")
    for pair, count in crossings.items():
        print(f"  {count:>5}  {pair}")
    print(f"imports up a layer: {len(f['imports_up_a_layer'])}")
    for line in f["imports_up_a_layer"]:
        print(f"  {line}")
    print(f"cli imports of domain/projections/adapters: {len(f['cli_imports_past_ledger'])}")
    for line in f["cli_imports_past_ledger"]:
        print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout to measure (default: this one)")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    figures = measure(arguments.root.resolve())
    if arguments.json:
        print(json.dumps(figures, indent=2))
    else:
        _print(figures)


if __name__ == "__main__":
    main()
