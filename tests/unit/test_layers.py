"""The layers hold: no import cycle, no upward import, no ``except ImportError`` around our code.

Reads every module of the repository with ``ast`` (nothing is imported), so
it sees imports inside functions too — the ones that hide a cycle.  The rules
(``docs/development.md`` draws them), lowest first:

    llmload.common                what server and load generator share: families, buckets,
                                  gcpolicy, limits; imports nothing of ours
    target_server                 the bundled server: imports no harness code
    loadtests (its own files)     options, durations, slo, percentile, redact
    loadtests.measure             record, SSE, timing core, protocol adapters
    loadtests.transport           target, HTTP/1.1 client, stamped reads, httpx, connect
    loadtests.workload            scenarios, datasets, context fit, token counts
    loadtests.run                 plan to records: runner, users, shapes, writer, sinks
    exporter  reports  dashboards read records; import loadtests (and llmload.common),
                                  never one another; reports' rooms in turn: draw, table,
                                  server + workloads, capacity, summary, page, gate
    llmload                       the composition point: run, ci, capacity, the CLI
    bench                         may import every package; tests may import bench

Everything installs under one namespace: the folders are ``llmload``'s
subpackages (``llmload.loadtests.run.runner``), so an import of a bare
``loadtests``/``reports``/... is an error too.  A unit imports only units of a
lower layer (or itself); ``__main__`` modules are thin entry points and may
delegate upward; nothing imports ``tests``.  Run it alone:
``python -m pytest tests/unit/test_layers.py``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
with open(ROOT / "pyproject.toml", "rb") as _f:
    #: installed package -> folder: pyproject's package-dir, the one declaration of the layout
    MAPPING: dict[str, str] = tomllib.load(_f)["tool"]["setuptools"]["package-dir"]
#: the repository's folders that install as ``llmload.<folder>``
SUBPACKAGES = tuple(folder for package, folder in MAPPING.items() if package == f"llmload.{folder}")
#: unit -> layer; a module may import units of a strictly lower layer, or its own
LAYER: dict[str, float] = {
    # what the server and the load generator share (llmload/common/): below both
    "llmload.common": -1,
    "target_server": 0,
    "loadtests": 1,
    "loadtests.measure": 2,
    "loadtests.transport": 3,
    "loadtests.workload": 3,
    "loadtests.run": 4,
    "exporter": 5,
    "dashboards": 5,
    # reports' rooms, lowest first: how numbers are written, the record table and its
    # statistics, the server's side and the workloads, capacity, the summary, the pages,
    # the gate; reports' own modules (build, cli) compose them
    "reports.draw": 5.0,
    "reports.table": 5.1,
    "reports.server": 5.2,
    "reports.workloads": 5.2,
    "reports.export": 5.2,
    "reports.capacity": 5.3,
    "reports.summary": 5.4,
    "reports.page": 5.5,
    "reports.gate": 5.6,
    "reports": 5.7,
    "llmload": 6,
    "bench": 7,
    "tests": 8,
}
#: same-layer imports that are allowed (siblings that read one another's definitions)
SIDEWAYS: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    """The name a file installs as (``reports/gate/holm.py`` -> ``llmload.reports.gate.holm``)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    folders = {folder: package for package, folder in MAPPING.items()}
    if parts[0] in folders:
        parts = (*folders[parts[0]].split("."), *parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(mod: str) -> str:
    """The layer unit of a module: its room (of loadtests or reports), its subpackage, or its
    top package."""
    parts = mod.split(".")
    if ".".join(parts[:2]) in LAYER:
        return ".".join(parts[:2])  # a room of the llmload folder itself (llmload.common)
    if parts[0] == "llmload" and len(parts) > 1 and parts[1] in SUBPACKAGES:
        parts = parts[1:]
        if len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in LAYER:
            return f"{parts[0]}.{parts[1]}"
    return parts[0]


def modules() -> dict[str, ast.Module]:
    found = {}
    for folder in ("bench", "tests", *MAPPING.values()):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[module_name(path)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def bare_imports(mods: dict[str, ast.Module]) -> list[str]:
    """Imports of a folder by its bare name (``import reports``): not installed, never ours."""
    bad = []
    for mod, tree in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            bad += [f"{mod}:{node.lineno} {n}" for n in names if n.split(".")[0] in SUBPACKAGES]
    return bad


def imported(tree: ast.Module, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import of one of ``known``, at any depth."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from pkg import mod`` imports pkg.mod when that is a module, else pkg
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name, node.lineno


def graph(mods: dict[str, ast.Module]) -> tuple[dict[str, set[str]], list[str]]:
    """The module import graph (entry points left out) and every upward import in it."""
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    upward = []
    for mod, tree in mods.items():
        src = unit(mod)
        entry = mod.endswith("__main__")
        for target, line in imported(tree, known):
            if target == mod or mod.startswith(target + "."):  # a package's own __init__
                continue
            if not entry:
                edges[mod].add(target)
            dst = unit(target)
            if src == dst or entry or (src, dst) in SIDEWAYS:
                continue
            if dst == "tests" or LAYER[dst] >= LAYER[src]:
                upward.append(f"{mod}:{line} imports {target} ({src} -> {dst})")
    return edges, upward


def guarded(mods: dict[str, ast.Module]) -> list[str]:
    """Imports of our own packages inside a ``try`` that catches ``ImportError``."""
    bad = []
    for mod, tree in mods.items():
        if unit(mod) in ("bench", "tests"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            caught = {
                n.id
                for h in node.handlers
                if h.type is not None
                for n in ast.walk(h.type)
                if isinstance(n, ast.Name)
            }
            if caught & {"ImportError", "ModuleNotFoundError"}:
                body = ast.Module(body=node.body, type_ignores=[])
                bad += [f"{mod}:{line} guards {t}" for t, line in imported(body, set(mods))]
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


MODULES = modules()


def test_no_import_cycle_between_modules() -> None:
    edges, _ = graph(MODULES)
    assert cycles(edges) == []


def test_no_upward_imports() -> None:
    _, upward = graph(MODULES)
    assert upward == []


def test_no_except_import_error_around_our_packages() -> None:
    assert guarded(MODULES) == []


def test_the_checker_sees_a_cycle_an_upward_import_and_a_guard() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    fake = {
        "llmload.reports": ast.parse(""),
        "llmload.reports.summary.make": ast.parse(
            "def f():\n    from llmload.loadtests.run.runner import run\n"
        ),
        "llmload.loadtests": ast.parse(""),
        "llmload.loadtests.run.runner": ast.parse(
            "try:\n    from llmload.reports.summary.make import build_summary\n"
            "except ImportError:\n    pass\n"
        ),
        "llmload.loadtests.measure.timing": ast.parse(
            "from llmload.loadtests.run.sinks import RecordSink\n"
        ),
        "llmload.loadtests.run.sinks": ast.parse(""),
        # an entry point may delegate upward
        "llmload.loadtests.__main__": ast.parse("from llmload.reports import summary\n"),
        "bench.x": ast.parse("import reports\nfrom loadtests.record import RequestRecord\n"),
        # a low room of reports importing a higher one
        "llmload.reports.table.loader": ast.parse("from llmload.reports.gate import verdict\n"),
        "llmload.reports.gate.verdict": ast.parse(""),
    }
    edges, upward = graph(fake)
    assert cycles(edges) == [["llmload.loadtests.run.runner", "llmload.reports.summary.make"]]
    assert sorted(upward) == [
        "llmload.loadtests.measure.timing:1 imports llmload.loadtests.run.sinks "
        "(loadtests.measure -> loadtests.run)",
        "llmload.loadtests.run.runner:2 imports llmload.reports.summary.make "
        "(loadtests.run -> reports.summary)",
        "llmload.reports.table.loader:1 imports llmload.reports.gate.verdict "
        "(reports.table -> reports.gate)",
    ]
    assert guarded(fake) == ["llmload.loadtests.run.runner:2 guards llmload.reports.summary.make"]
    assert bare_imports(fake) == ["bench.x:1 reports", "bench.x:2 loadtests.record"]


def test_every_import_names_the_llmload_namespace() -> None:
    assert bare_imports(MODULES) == []


def at_import(tree: ast.Module) -> ast.Module:
    """The statements that run when the module is imported (function bodies left out)."""
    body: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                todo.append(child)
    imports = [n for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
    return ast.Module(body=list(imports), type_ignores=[])


def test_unit_tests_do_not_import_locust() -> None:
    # importing locust gevent-patches the process; when urllib3 is already loaded (any test
    # that touches dashboards) that patch recurses and the unit run stops at collection
    eager = {m: at_import(tree) for m, tree in MODULES.items()}
    known = set(MODULES)
    edges = {m: {t for t, _ in imported(tree, known)} for m, tree in eager.items()}
    patched = {
        m
        for m, tree in eager.items()
        for node in tree.body
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if name.split(".")[0] == "locust"
    }
    bad = []
    for mod in MODULES:
        if not mod.startswith("tests.unit."):
            continue
        seen, todo = set(), [mod]
        while todo:
            cur = todo.pop()
            if cur not in seen:
                seen.add(cur)
                todo += edges.get(cur, ())
        if seen & patched:
            bad.append(f"{mod} -> {sorted(seen & patched)[0]}")
    assert bad == []


def test_reports_is_rooms_each_with_its_layer_and_one_job() -> None:
    # the top of reports/ holds only its composition; every room has a layer above and a
    # one-line docstring saying its job
    folder = ROOT / MAPPING["llmload.reports"]
    assert sorted(p.name for p in folder.glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "build.py",
        "cli.py",
    ]
    rooms = sorted(p.parent.name for p in folder.glob("*/__init__.py"))
    assert rooms and all(f"reports.{r}" in LAYER for r in rooms), rooms
    for room in rooms:
        doc = ast.get_docstring(MODULES[f"llmload.reports.{room}"]) or ""
        first = doc.split("\n\n")[0]
        assert first.endswith(".") and "\n" not in first, f"reports/{room}: {first!r}"


def test_the_shared_room_imports_nothing_of_ours_and_the_server_no_harness() -> None:
    # llmload.common (gcpolicy, limits, families, the embedded recipe and tokenizer) is below
    # target_server: the server reaches the harness through it
    # never, and the harness reaches the server's code only from the top (launching it)
    edges, _ = graph(MODULES)
    common = [m for m in MODULES if unit(m) == "llmload.common"]
    assert common and all(unit(t) == "llmload.common" for m in common for t in edges[m])
    harness = {"loadtests", "exporter", "dashboards"} | {u for u in LAYER if "." in u}
    below = [
        f"{m} -> {t}"
        for m in MODULES
        if unit(m) in harness - {"llmload.common"}
        for t in edges[m]
        if unit(t) == "target_server"
    ]
    assert below == []
