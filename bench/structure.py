"""The code's shape, for the redesign's before/after figures: modules and lines per package,
the largest modules, functions over 60 lines and the longest ones, and import cycles among
our modules at import time (module-level imports; `TYPE_CHECKING` blocks and imports inside
functions do not run at import time and are left out).

    python bench/structure.py            # the working tree
    python bench/structure.py --json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("domain", "projections", "adapters", "ledger", "cli")
LONG = 60


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" in path.parts or "pytest_plugin" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _runtime_imports(
    tree: ast.Module, name: str, known: set[str], deferred: bool = False
) -> set[str]:
    """Our modules this one imports when it is imported (with `deferred`, also those its
    functions import when they run: a circle hidden by a function-level import)."""
    out: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if deferred and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(node.body)
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{a.name}" for a in node.names} & known
                out.update(submodules)
                # `from package import submodule` needs the submodule, not the package's body
                if node.module in known and len(submodules) < len(node.names):
                    out.add(node.module)
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


def measure() -> dict[str, object]:
    modules = _modules()
    known = set(modules)
    lines: dict[str, int] = {}
    functions: list[tuple[int, str]] = []
    graph: dict[str, set[str]] = {}
    deferred: dict[str, set[str]] = {}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        lines[name] = text.count("\n")
        tree = ast.parse(text)
        graph[name] = _runtime_imports(tree, name, known)
        deferred[name] = _runtime_imports(tree, name, known, deferred=True)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((length, f"{name}.{node.name}"))
    functions.sort(reverse=True)
    per_package = {
        p: {"modules": sum(1 for n in lines if n.split(".")[0] == p),
            "lines": sum(v for n, v in lines.items() if n.split(".")[0] == p)}
        for p in PACKAGES
    }  # fmt: skip
    return {
        "modules": len(lines),
        "lines": sum(lines.values()),
        "per_package": per_package,
        "largest_modules": sorted(lines.items(), key=lambda kv: -kv[1])[:10],
        f"functions_over_{LONG}_lines": sum(1 for length, _ in functions if length > LONG),
        "longest_functions": [(n, length) for length, n in functions[:10]],
        "import_cycles": _cycles(graph),
        "import_cycles_with_function_imports": _cycles(deferred),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    figures = measure()
    if parser.parse_args().json:
        print(json.dumps(figures, indent=2))
        return
    print(f"modules {figures['modules']}, lines {figures['lines']}")
    for package, counts in figures["per_package"].items():  # type: ignore[attr-defined]
        print(f"  {package:<12} {counts['modules']:>3} modules {counts['lines']:>6} lines")
    print("largest modules:")
    for name, count in figures["largest_modules"]:  # type: ignore[attr-defined]
        print(f"  {count:>5}  {name}")
    print(f"functions over {LONG} lines: {figures[f'functions_over_{LONG}_lines']}")
    for name, length in figures["longest_functions"]:  # type: ignore[attr-defined]
        print(f"  {length:>5}  {name}")
    cycles = figures["import_cycles"]
    print(f"import cycles at import time: {len(cycles)}")  # type: ignore[arg-type]
    for cycle in cycles:  # type: ignore[attr-defined]
        print("  " + " <-> ".join(cycle))
    hidden = figures["import_cycles_with_function_imports"]
    print(f"import cycles counting imports inside functions: {len(hidden)}")  # type: ignore[arg-type]
    for cycle in hidden:  # type: ignore[attr-defined]
        print("  " + " <-> ".join(cycle))


if __name__ == "__main__":
    main()
