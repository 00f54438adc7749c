"""The layers hold: every lbscale import points down one written order (docs/architecture.md, "Layers"), no two
modules import each other round a circle, and no function is longer than a screen.

The order, top to bottom (a module may import its own layer and any layer below it, never one above):

    cli > studies > report > sweep > train > analysis > data > the ground floor

- cli: the Click group; each command parses options and calls one function.
- studies: commands that compose several layers (branch: plan, run, fit, figure; filter; the gns measurement of
  a checkpoint; `--until-resolved`'s decisions from the report's fit; `lbscale bench allreduce`, which starts
  processes through train.distributed, reads sweep.systems and fits analysis.allreduce_model). `doctor.py` sits on
  this level too, though it keeps its place in the tree: a command of its own that reaches across layers (it opens
  prepared data, reads a cluster profile from sweep.systems and asks SLURM), nothing but the CLI imports it, and
  just under cli it may grow (a doctor check of a study, say) without an import pointing up.
- report: the result store -> tables, figures, the verdict; it may read sweep's state (sweep.state), nothing
  below imports it.
- sweep: spec -> trial plans; launchers; rounds.
- train: one trial (its config included, so the trial imports its own contract downhill).
- analysis: pure math (the local critical batch and the one EMA, noise-scale estimators, the comm model, the
  rounds' decisions): it imports no torch (held below); measuring on a network is train's, commands are studies'.
- data: sources, formats, the loader, transforms.
- the ground floor: results, task, ranges, errors, progress, slurm (and the package's __init__).

Lazy imports inside functions count as much as those at the top: a function-level import that points up is the
same dependency, only hidden. A new top-level module or package must be given a layer here (the test says so).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lbscale"
ORDER = ["cli", "studies", "report", "sweep", "train", "analysis", "data", "ground"]
# the first name under lbscale -> its layer (the packages are their own layer)
PLACE = {"cli": "cli", "studies": "studies", "doctor": "studies", "report": "report",
         "sweep": "sweep", "train": "train", "analysis": "analysis", "data": "data",
         "results": "ground", "task": "ground", "ranges": "ground", "errors": "ground", "progress": "ground",
         "slurm": "ground", "__init__": "ground"}
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Every lbscale module by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("lbscale",) + path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return PLACE.get(parts[1] if len(parts) > 1 else "__init__")


def _imports(module: str, path: Path):
    """(line, imported lbscale module) for every import in `module`, at any depth; `from X import name` names
    the module X.name where that is a module, else X."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
        else:
            continue
        for target in targets:
            if target == "lbscale" or target.startswith("lbscale."):
                yield node.lineno, target


def _graph() -> dict[str, dict[str, list[int]]]:
    """module -> {imported lbscale module: the lines that import it}."""
    graph: dict[str, dict[str, list[int]]] = {}
    for module, path in MODULES.items():
        edges = graph.setdefault(module, {})
        for line, target in _imports(module, path):
            if target != module:
                edges.setdefault(target, []).append(line)
    return graph


def _where(module: str, lines: list[int]) -> str:
    return f"{MODULES[module].relative_to(PACKAGE.parent)}:{','.join(map(str, sorted(set(lines))))}"


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if _layer(m) is None]
    assert not unplaced, f"modules with no layer (add them to PLACE and to docs/architecture.md): {unplaced}"


def test_imports_point_down_the_layers():
    up = []
    rank = {m: ORDER.index(_layer(m)) for m in MODULES if _layer(m)}  # an unplaced module fails the test above
    for module, edges in _graph().items():
        for target, lines in edges.items():
            if target not in MODULES:
                up.append(f"{_where(module, lines)}: {target} is no lbscale module")
            elif module in rank and target in rank and rank[target] < rank[module]:
                up.append(f"{_where(module, lines)}: {module} ({_layer(module)}) imports {target} "
                          f"({_layer(target)}), a layer above it")
    assert not up, "imports that point up the layers " + " > ".join(ORDER) + ":\n" + "\n".join(up)


def _cycles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """One circle per back edge of a depth-first search (each reported once, from its smallest module)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def visit(node: str):
        state[node] = 1
        stack.append(node)
        for target in graph.get(node, {}):
            if state.get(target) == 1:
                circle = stack[stack.index(target):]
                i = circle.index(min(circle))
                found.add(tuple(circle[i:] + circle[:i]))
            elif target in graph and target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return [list(c) for c in sorted(found)]


def test_no_import_cycles():
    graph = _graph()
    lines = [" -> ".join(f"{m} ({_where(m, graph[m][nxt])})" for m, nxt in zip(c, c[1:] + c[:1])) + f" -> {c[0]}"
             for c in _cycles(graph)]
    assert not lines, "modules that import each other round a circle:\n" + "\n".join(lines)


def test_cycle_finder_finds_a_circle():
    graph = {"a": {"b": [1]}, "b": {"c": [1]}, "c": {"a": [1]}, "d": {"a": [1]}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": [1]}, "b": {}}) == []


def test_analysis_is_pure_math():
    heavy = {"torch", "torchvision", "timm", "torchmetrics"}
    found = []
    for module, path in MODULES.items():
        if _layer(module) != "analysis":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{_where(module, [node.lineno])}: {n}" for n in names if n.split(".")[0] in heavy]
    assert not found, "analysis/ is pure math; these imports belong in train/ or studies/:\n" + "\n".join(found)


def test_functions_fit_on_a_screen():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions longer than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_no_private_name_crosses_a_module():
    """A name with a leading underscore is its module's own: another module that needs it makes it public (or the
    code moves to where it is used)."""
    crossing = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("lbscale")):
                crossing += [f"{_where(module, [node.lineno])}: {node.module or '.'}.{a.name}"
                             for a in node.names if a.name.startswith("_") and a.name != "__version__"]
    assert not crossing, "private names imported from another module:\n" + "\n".join(crossing)


# the files that read as a story of small calls, and how long each may grow (docs/architecture.md)
STORY_FILES = {"train/trial.py": 300, "studies/design.py": 300}


def test_the_story_files_stay_short():
    long = [f"lbscale/{name}: {n} lines (at most {limit})" for name, limit in STORY_FILES.items()
            if (n := len((PACKAGE / name).read_text().splitlines())) > limit]
    assert not long, "story files past their length:\n" + "\n".join(long)
