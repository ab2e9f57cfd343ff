"""The package layout stays what the README shows: no import cycle between mmspec's folders (every import counted,
module-level or inside a function), nothing in the library imports the benchmarks, every ``__init__.py`` is a face
(imports and ``__all__`` only), and no module grows past ~450 lines without saying why at its top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "mmspec"


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def _imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            found |= {target} | {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {t for t in found if t.startswith("mmspec")}


def _group(module: str) -> str:
    """A folder of mmspec (drafters, verifiers, ...), or a top-level module (engine, runner, ...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mmspec"


def _graph() -> dict[str, set[str]]:
    known = {name for name, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in _modules():
        for target in _imports(name, path):
            while target not in known and "." in target:  # `from .x import name`: the module x
                target = target.rsplit(".", 1)[0]
            if _group(target) != _group(name) and target != "mmspec":
                graph.setdefault(_group(name), set()).add(_group(target))
    return graph


def test_no_import_cycle_between_folders():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(path + [node, nxt])}")
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_only_the_cli_imports_the_benchmarks():
    graph = _graph()
    importers = sorted(g for g, targets in graph.items() if "bench" in targets)
    assert importers == ["cli"], importers


def test_init_files_are_faces():
    for name, path in _modules():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            ok = isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # the docstring
            ok = ok or (isinstance(node, (ast.Assign, ast.AnnAssign)) and
                        any(getattr(t, "id", None) in ("__all__", "__version__") for t in getattr(node, "targets", [node.target] if hasattr(node, "target") else [])))  # fmt: skip
            assert ok, f"{path}: line {node.lineno} is not an import or __all__ (an __init__ is a face, not a home)"


def test_long_modules_say_why():
    for _, path in _modules():
        text = path.read_text()
        if text.count("\n") > 450:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "Longer than 450 lines because" in doc, f"{path}: {text.count(chr(10))} lines and no reason at its top"
