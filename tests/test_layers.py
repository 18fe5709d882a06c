"""snaffle's import graph, built with `ast`: no cycle between modules or between rooms, and no import that crosses
the layers README.md's layout section draws (a room may import its own layer and the ones below, never above).

Every `import` and `from ... import` of a snaffle module counts, wherever it stands: at module level, inside a
function (a lazy import is a dependency all the same) and under `if TYPE_CHECKING:` (so is one made for types).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping, Sequence, Set
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "snaffle"
SKIPPED = ("examples/*/repo/**/*.py",)
"""Not snaffle's code: the offline demo's planted repository is data the demo copies."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("version", "types", "exceptions"),
    (
        "index",
        "callgroup",
        "diskguard",
        "sandbox",
        "interpreter",
        "scratch",
        "workspace",
        "model",
        "trajectory",
        "prompts",
        "data",
        "settings",
        "cache",
        "shim",
        "testing",
        "examples",
    ),
    ("tools", "gates", "primitives", "observations", "trace"),
    ("harness",),
    ("agentless", "arms"),
    ("run", "adapters", "swebench"),
    ("cli", "demo", "console", "snaffle"),
)
"""Rooms by layer, lowest first; `snaffle` is the package's own `__init__` (the Python API, docs/api.md)."""

ONLY: Mapping[str, frozenset[str]] = {
    "version": frozenset(),
    "shim": frozenset({"types", "exceptions"}),  # it knows no harness
    "trace": frozenset({"trajectory", "types", "exceptions", "workspace"}),
    "testing": frozenset(),
    "examples": frozenset(),
}
"""Rooms held to a narrower list than their layer allows (besides themselves)."""

Graph = Mapping[str, Set[str]]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file for every module of the package under `root`."""
    skipped = {path for pattern in SKIPPED for path in root.glob(pattern)}
    names: dict[str, Path] = {}
    for path in sorted(set(root.rglob("*.py")) - skipped):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names one statement imports: `from a import b` imports `a.b`, a module or a name in `a`."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        parent = parts[: len(parts) - node.level + (1 if is_package else 0)]
        base = ".".join([*parent, *([base] if base else [])])
    yield from (f"{base}.{alias.name}" for alias in node.names)


def resolve(name: str, known: Set[str]) -> str | None:
    """The longest known module `name` is or lies in."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement anywhere in its file."""
    names = module_names(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        statements = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        targets = {t for node in statements for t in import_targets(node, module, is_package)}
        resolved = {resolve(target, names.keys()) for target in targets}
        graph[module] = {target for target in resolved if target is not None and target != module}
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's components of more than one node, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def shortest_cycle(graph: Graph, component: Sequence[str]) -> list[str]:
    """A shortest path from the component's first node back to itself, through the component only."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph.get(node, set()) & members):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    return list(component)


def cycles(graph: Graph) -> list[str]:
    """Each cycle of the graph, one per strongly connected component, as `a -> b -> a`."""
    return [" -> ".join(shortest_cycle(graph, component)) for component in strongly_connected(graph)]


def room_of(module: str) -> str:
    """`snaffle.agentless.repair` -> `agentless`; the package's own `__init__` is the room `snaffle`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_graph(graph: Graph) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = room_of(module)
        rooms.setdefault(here, set()).update(room_of(t) for t in targets if room_of(t) != here)
    return rooms


def may_import(importer: str, imported: str, layers: Sequence[Sequence[str]], only: Mapping[str, Set[str]]) -> bool:
    """Its own room always; otherwise a room of its layer or below, and within its narrower list if it has one."""
    if importer == imported:
        return True
    layer = {room: number for number, rooms in enumerate(layers) for room in rooms}
    if importer in only and imported not in only[importer]:
        return False
    return layer[imported] <= layer[importer]


def crossings(graph: Graph, layers: Sequence[Sequence[str]], only: Mapping[str, Set[str]]) -> list[str]:
    """Every import the layer table forbids, as `importer (room) -> imported (room)`."""
    return [
        f"{module} ({room_of(module)}) -> {target} ({room_of(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if not may_import(room_of(module), room_of(target), layers, only)
    ]


def rooms_on_disk(root: Path, package: str) -> set[str]:
    """Every top-level module and subpackage of the package, and the package's own `__init__`."""
    modules = {path.stem for path in root.glob("*.py") if path.name != "__init__.py"}
    packages = {path.parent.name for path in root.glob("*/__init__.py")}
    return modules | packages | {package}


def test_every_room_has_exactly_one_layer() -> None:
    tabled = [room for rooms in LAYERS for room in rooms]
    assert len(tabled) == len(set(tabled))
    assert set(tabled) == rooms_on_disk(PACKAGE, "snaffle")
    assert set(ONLY) <= set(tabled) and all(allowed <= set(tabled) for allowed in ONLY.values())


def test_no_cycle_between_modules() -> None:
    found = cycles(import_graph(PACKAGE, "snaffle"))
    assert not found, "import cycles between modules:\n" + "\n".join(found)


def test_no_cycle_between_rooms() -> None:
    found = cycles(room_graph(import_graph(PACKAGE, "snaffle")))
    assert not found, "import cycles between rooms:\n" + "\n".join(found)


def test_no_import_crosses_the_layers() -> None:
    found = crossings(import_graph(PACKAGE, "snaffle"), LAYERS, ONLY)
    assert not found, "imports the layer table forbids:\n" + "\n".join(found)


def write_package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_the_graph_counts_lazy_type_checking_and_relative_imports(tmp_path: Path) -> None:
    root = write_package(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "low.py": "import os\n",
            "mid.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import thing\n",
            "top.py": "def later():\n    import pkg.mid\n",
            "sub/__init__.py": "from . import leaf\n",
            "sub/leaf.py": "from .. import low\nfrom ..sub import NAME\n",
            "examples/demo/repo/stats.py": "import pkg.top\n",
        },
    )
    assert import_graph(root, "pkg") == {
        "pkg": set(),
        "pkg.low": set(),
        "pkg.mid": {"pkg.low"},
        "pkg.top": {"pkg.mid"},
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.low", "pkg.sub"},
    }
    assert rooms_on_disk(root, "pkg") == {"pkg", "low", "mid", "top", "sub"}


def test_cycles_and_crossings_are_found_and_named() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}, "p.e.x": {"p.e.y"}, "p.e.y": set()}
    assert cycles(graph) == ["p.a -> p.b -> p.c -> p.a"]
    assert cycles({"a": {"b"}, "b": set()}) == []
    layers = (("a", "b"), ("c", "e"), ("d",))
    assert crossings(graph, layers, {}) == ["p.b (b) -> p.c (c)"]
    assert crossings(graph, layers, {"d": {"c"}}) == ["p.b (b) -> p.c (c)", "p.d (d) -> p.a (a)"]
    assert room_graph(graph) == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
