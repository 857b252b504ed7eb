"""Architecture rules that keep the product maintainable and safe, each checked on the AST.

- ``backend/`` never imports the UI (``gradio``, ``webui``).
- The layers of ``backend/`` (``LAYERS``): every import, in every scope (module top,
  functions, methods, ``if``/``try`` blocks; relative imports resolved), points down the
  order or stays in its own layer package; no import circle among backend modules; every
  import of a backend module names one that exists.
- Project modules are imported at module top; the imports written inside functions today
  are counted per module against a ratchet (``INNER_ALLOWANCE``). Heavy libraries
  (``HEAVY``) are imported inside functions, except in the modules of ``HEAVY_AT_TOP``.
- Nothing but the process module (``backend/jobs/processes.py``) starts a process in
  ``backend/`` and ``webui/``; ``launch.py``'s bootstrap is the one allowed exception.
- No module but ``backend/core/rundir.py`` names a run file or folder (the names come from
  rundir.py itself, so a name added there extends the rule).
- No shell strings; no unsafe ``torch.load``.

Each rule reports every offending file and line. ``test_layering_rules_catch_violations``
and ``test_import_rules_catch_violations`` prove the scanners fail on planted violations.
"""
import ast
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from backend.core import rundir

ROOT = Path(__file__).resolve().parents[1]
UI_PACKAGES = {"gradio", "webui", "gradio_client"}

# Modules that may start processes, with the reason.
SPAWN_ALLOWED = {
    "backend/jobs/processes.py": "the process module: supervisors, stages, nvidia-smi",
    "launch.py": "bootstrap before the app exists: creates .venv, installs requirements with "
                 "pip, probes the venv's python and re-executes itself there",
}
# Calls that start a process, per module.
SPAWN_CALLS = {
    "subprocess": {"run", "call", "check_call", "check_output", "Popen", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execl",
           "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl",
           "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"},
    "pty": {"spawn", "fork"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "multiprocessing": {"Process", "Pool", "get_context"},
}

# Strings that may name a run file outside rundir.py, with the reason ((file, text) pairs).
RUN_NAME_ALLOWED: dict[tuple[str, str], str] = {
    ("backend/config/schema.py", "samples"): "a group of the form (GROUPS), not a folder",
    ("webui/form.py", "samples"): "a group of the form (GROUP_ORDER), not a folder",
    ("backend/families/flux2_dev/reference_launch.py", "accelerate_config_zero3.yaml"):
        "the name of a launch file the reference ships, not a run file",
}


def _sources(*dirs: str) -> list[Path]:
    return sorted(q for d in dirs for q in (ROOT / d).rglob("*.py"))


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _tree(p: Path) -> ast.AST:
    return ast.parse(p.read_text(encoding="utf-8"), filename=str(p))


# ------------------------------------------------------------------------- UI imports
def ui_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] in UI_PACKAGES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                node.module.split(".")[0] in UI_PACKAGES:
            found.append((node.lineno, node.module))
    return found


def test_backend_never_imports_the_ui():
    offenders = [f"{_rel(p)}:{line} imports {name}" for p in _sources("backend")
                 for line, name in ui_imports(_tree(p))]
    assert offenders == [], "backend/ must not import the UI:\n" + "\n".join(offenders)


# ------------------------------------------------------------------------- processes
def spawn_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls (and imports of calls) that start a process: ``subprocess.run``, ``os.execve``,
    ``from subprocess import Popen``, an aliased ``import subprocess as sp`` ... ``sp.run``."""
    aliases: dict[str, str] = {}  # local name -> module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in SPAWN_CALLS:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in SPAWN_CALLS:
            for a in node.names:
                if a.name in SPAWN_CALLS[node.module] or a.name == "*":
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name):
            module = aliases.get(node.func.value.id)
            if module and node.func.attr in SPAWN_CALLS[module]:
                found.append((node.lineno, f"{module}.{node.func.attr}(...)"))
    return sorted(found)


def test_only_the_process_module_starts_processes():
    offenders = []
    for p in _sources("backend", "webui") + [ROOT / "launch.py"]:
        if _rel(p) in SPAWN_ALLOWED:
            continue
        offenders += [f"{_rel(p)}:{line} {what}" for line, what in spawn_sites(_tree(p))]
    assert offenders == [], ("only backend/jobs/processes.py starts processes (ask it, e.g. "
                             "gpu_query, start_stage):\n" + "\n".join(offenders))


def test_the_allowed_spawners_exist_and_spawn():
    """An allowlist entry that no longer starts anything is stale: remove it."""
    for rel in SPAWN_ALLOWED:
        assert spawn_sites(_tree(ROOT / rel)), f"{rel} starts no process: drop it"


# ------------------------------------------------------------------------- run files
def _pattern(name: str) -> str:
    """A rundir name as a regex: ``{stage}`` stands for a stage name, ``{}`` or a glob."""
    parts = re.split(r"\{\w+\}", name)
    body = r"(?:\{\}|<\w+>|[\w*?\[\]-]+)".join(re.escape(x) for x in parts)
    return rf"(?<![\w.-]){body}(?![\w-])"


FILE_RE = re.compile("|".join(_pattern(n) for n in rundir.FILE_NAMES))
FOLDERS = set(rundir.FOLDER_NAMES)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.AST) -> str | None:
    """A string constant, or an f-string with ``{}`` for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def run_file_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Strings that name a run file or folder:

    - any string holding a file name of the layout (``run.yaml``, ``accelerate_train.yaml``,
      ``f"deepspeed_{stage}.json"``, a glob ``accelerate_*.yaml`` ...);
    - a folder name of the layout used as a path part: ``x / "logs"``, ``joinpath("output")``,
      ``"output/state"``, ``f"{rid}/logs/{name}"``;
    - a module-level constant that is (or lists) a folder name: ``STATE_DIR = "state"``.
    Docstrings are documentation and are not read.
    """
    skip = _docstrings(tree)
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []

    def folder_part(text: str) -> bool:
        return "/" in text and bool(FOLDERS & set(text.split("/")))

    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and id(node) not in skip and id(node) not in inner:
            if FILE_RE.search(text) or folder_part(text):
                found.append((node.lineno, text))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if _text(side) in FOLDERS:
                    found.append((side.lineno, _text(side)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "joinpath":
            found += [(a.lineno, _text(a)) for a in node.args if _text(a) in FOLDERS]
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List, ast.Set)) \
                else [node.value]
            found += [(v.lineno, _text(v)) for v in values if _text(v) in FOLDERS]
    return sorted(set(found))


def test_only_rundir_names_a_run_file():
    offenders = []
    for p in _sources("backend", "webui"):
        if _rel(p) == "backend/core/rundir.py":
            continue
        for line, text in run_file_names(_tree(p)):
            if (_rel(p), text) not in RUN_NAME_ALLOWED:
                offenders.append(f"{_rel(p)}:{line} {text!r}")
    assert offenders == [], ("the run-folder layout belongs to backend/core/rundir.py (RunDir); "
                             "ask it instead of naming:\n" + "\n".join(offenders))


# ------------------------------------------------------------------------- imports and layers
# The layers of backend/, bottom to top. A module imports from its own layer package (in any
# direction, as long as no circle forms) and from the layers before it. stages and jobs share
# one rank and import neither each other: the job runner starts a stage as a process
# (``python -m backend.stages.<name>``) and the two share only run files. publish reads a
# finished run's folder and sends it to a hub. webui/ sits above all of them
# (test_backend_never_imports_the_ui).
LAYERS = ["core", "families", "config", "models", "data", "training", "planning",
          ("stages", "jobs"), "publish"]
RANK = {name: rank for rank, level in enumerate(LAYERS)
        for name in ((level,) if isinstance(level, str) else level)}
# Modules of backend/ outside the layer packages: (rank, why).
OUTSIDE = {
    "backend": (-1, "the package's empty __init__.py, which every import of backend runs"),
    "backend.supervisor": (len(LAYERS), "the entry point of runs queued before backend/jobs "
                                        "existed; above every layer, nothing imports it"),
}

# Heavy libraries: slow to import, and needed only once a stage really loads a model or
# reads pixels. numpy and PIL are fast, but only pixel work needs them.
HEAVY = {"torch", "diffusers", "transformers", "peft", "deepspeed", "bitsandbytes", "torchao",
         "av", "accelerate", "safetensors", "numpy", "PIL"}
# Modules that import a heavy library at module top, with the reason. Each is itself
# imported only inside functions, so importing any other backend module loads none of them.
HEAVY_AT_TOP = {
    "backend/models/export.py": "the LoRA key converter and its CLI; every caller needs torch",
    "backend/families/qwen_image/demo.py": "the CPU demo asset builder, a CLI of its own",
    "backend/families/flux2_klein/tiny.py": "builds a tiny model: torch all the way",
    "backend/families/qwen_image/tiny.py": "builds a tiny model: torch all the way",
    "backend/families/wan/tiny.py": "builds a tiny model: torch all the way",
    "backend/families/z_image/tiny.py": "builds a tiny model: torch all the way",
}

# Project imports written inside a function or method today, per module: a ratchet that only
# goes down (test_project_modules_are_imported_at_module_top). Lower it as imports move up.
INNER_ALLOWANCE: dict[str, int] = {}


@dataclass(frozen=True)
class Import:
    """One project module an import statement runs."""
    file: str  # the importing file, relative to ROOT
    line: int
    source: str  # the importing module
    target: str  # ``from pkg import name``: pkg; ``from pkg import mod``: pkg.mod
    exists: bool  # False: the statement names a backend module that does not exist
    inner: bool  # written inside a function or method: it runs at call time
    package: bool  # implied: importing pkg.mod first runs pkg/__init__.py
    stmt: tuple[int, int]  # the statement's (line, column)


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _in_functions(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a function or method (at any depth)."""
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner |= {id(n) for n in ast.walk(node) if n is not node}
    return inner


def _named(source: str, is_package: bool, node: ast.Import | ast.ImportFrom,
           modules: set[str]) -> list[str]:
    """The absolute names one import statement names (``from a import b``: ``a.b`` when that
    is a module, else ``a``); a relative import that climbs out of ``backend`` keeps its dots."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = source.split(".") if is_package else source.split(".")[:-1]
        if node.level > len(package):
            return ["." * node.level + ".".join(filter(None, [node.module, a.name]))
                    for a in node.names]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def project_imports(files: dict[str, str]) -> list[Import]:
    """Every import of a backend module in ``files`` ({path relative to ROOT: source}), in
    every scope. Importing ``pkg.mod`` also runs ``pkg/__init__.py``: that is an (implied)
    import of ``pkg`` unless ``pkg`` is the importer or one of its own packages, which are
    running already. ``importlib.import_module`` calls are not read (the family registry
    loads the family folders so)."""
    packages = {_module_name(rel) for rel in files if rel.endswith("/__init__.py")}
    modules = {_module_name(rel) for rel in files}
    found = []
    for rel, text in files.items():
        source = _module_name(rel)
        tree = ast.parse(text, filename=rel)
        inner = _in_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            at = (node.lineno, node.col_offset)
            for name in dict.fromkeys(_named(source, source in packages, node, modules)):
                if name.split(".")[0] not in ("backend", ""):
                    continue
                exists = name in modules
                if name == source:
                    continue
                found.append(Import(rel, node.lineno, source, name, exists, id(node) in inner,
                                    False, at))
                if not exists:
                    continue
                parts = name.split(".")
                for n in range(1, len(parts)):
                    pkg = ".".join(parts[:n])
                    if pkg in modules and not (source + ".").startswith(pkg + "."):
                        found.append(Import(rel, node.lineno, source, pkg, True,
                                            id(node) in inner, True, at))
    return sorted(found, key=lambda i: (i.file, i.stmt, i.target))


def _layer(module: str) -> str | None:
    if module in OUTSIDE:
        return module
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def _rank(layer: str) -> int:
    return RANK[layer] if layer in RANK else OUTSIDE[layer][0]


def layerless_modules(files: dict[str, str]) -> list[str]:
    return sorted(f"{rel} is in no layer: move it into one of {', '.join(RANK)}"
                  for rel in files if _layer(_module_name(rel)) is None)


def upward_imports(imports: list[Import]) -> list[str]:
    """Imports of a module in a higher layer, or in another layer of the same rank."""
    found = []
    for i in imports:
        a, b = _layer(i.source), _layer(i.target)
        if i.exists and not i.package and a and b and a != b and _rank(b) >= _rank(a):
            found.append(f"{i.file}:{i.line} imports {i.target} (layer {a} -> layer {b})")
    return list(dict.fromkeys(found))


def missing_modules(imports: list[Import]) -> list[str]:
    return list(dict.fromkeys(f"{i.file}:{i.line} imports {i.target}, which is no module"
                              for i in imports if not i.exists))


def import_circles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of the module graph (all scopes) with more than one
    module, each sorted (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.exists:
            graph.setdefault(i.source, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def inner_project_imports(imports: list[Import]) -> Counter:
    """Per file: the import statements inside functions or methods that import a backend
    module (a statement naming several counts once). Imports of a module of ``HEAVY_AT_TOP``
    are not counted: outside those modules they must stay inside functions
    (test_heavy_libraries_are_imported_lazily), so they are no debt of the ratchet."""
    heavy = {_module_name(rel) for rel in HEAVY_AT_TOP}
    return Counter(f for f, _ in {(i.file, i.stmt) for i in imports
                                  if i.inner and not i.package and i.target not in heavy})


def _type_checking(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (read by type checkers, never run)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return found


def heavy_at_top(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of a heavy library outside functions (module top, ``if``/``try`` blocks; not
    under ``if TYPE_CHECKING:``, which never runs)."""
    inner = _in_functions(tree) | _type_checking(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in HEAVY]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in HEAVY:
            found.append((node.lineno, node.module))
    return sorted(found)


@lru_cache(maxsize=1)
def _backend_files() -> dict[str, str]:
    return {_rel(p): p.read_text(encoding="utf-8") for p in _sources("backend")}


@lru_cache(maxsize=1)
def _backend_imports() -> list[Import]:
    return project_imports(_backend_files())


def test_every_project_import_names_a_module():
    offenders = missing_modules(_backend_imports())
    assert offenders == [], ("backend imports a module that does not exist (moved? it fails "
                             "only when that line runs):\n" + "\n".join(offenders))


def test_imports_point_down_the_layers():
    """Every import of a backend module, in every scope, points to the importer's own layer
    package or to one before it in ``LAYERS``; stages and jobs never import each other."""
    offenders = layerless_modules(_backend_files()) + upward_imports(_backend_imports())
    assert offenders == [], (
        "imports must point down " + " -> ".join(
            "/".join(x) if isinstance(x, tuple) else x for x in LAYERS) +
        " (cut the edge at its cause; a lazy import inside a function is still an import):\n" +
        "\n".join(offenders))


def test_no_import_circles():
    """No circle among backend modules, whatever scope the imports are written in (an import
    inside a function hides a circle from Python, not from the reader)."""
    imports = _backend_imports()
    report = []
    for circle in import_circles(imports):
        report.append(f"circle of {len(circle)}: {', '.join(circle)}")
        members = set(circle)
        report += list(dict.fromkeys(
            f"    {i.file}:{i.line} imports {i.target}" + (" (its __init__)" if i.package else "")
            for i in imports if i.source in members and i.target in members))
    assert report == [], "import circles:\n" + "\n".join(report)


def test_project_modules_are_imported_at_module_top():
    """Project modules are imported at module top, where a reader sees every dependency and
    Python sees every circle. ``INNER_ALLOWANCE`` holds the imports of project modules written
    inside functions or methods today, per module: a ratchet. The test fails when a module has
    MORE than its allowance (write the import at the top), and also when it has FEWER: then
    lower its allowance to the new count (drop the entry at 0), so a moved import cannot come
    back. ``if``/``try`` blocks at module level count as module top (``TYPE_CHECKING``
    imports included).

    Only heavy libraries (``HEAVY``) are imported inside functions, and every backend module
    may do so; all but ``HEAVY_AT_TOP`` must (test_heavy_libraries_are_imported_lazily). The
    reason: config, data, planning and the families are imported by the UI process, the job
    supervisor and the estimator, which must start without torch
    (tests/test_ui_startup.py, tests/test_config.py, tests/test_estimator.py), and each stage
    (``backend/stages/*``) checks its arguments, config and dataset and refuses bad input
    before it loads torch (tests/test_train.py::test_bad_input_fails_before_heavy_imports).
    Optional packages (prodigyopt, modelscope, ...) are imported where used, so a missing
    one names the package to install."""
    counts = inner_project_imports(_backend_imports())
    files = set(_backend_files())
    problems = []
    for rel in sorted(set(counts) | set(INNER_ALLOWANCE)):
        have, allowed = counts.get(rel, 0), INNER_ALLOWANCE.get(rel, 0)
        if have > allowed:
            problems.append(f"{rel}: {have} project imports inside functions, allowance "
                            f"{allowed}: import at module top")
        elif have < allowed:
            problems.append(f"{rel}: {have} project imports inside functions, allowance "
                            f"{allowed}: lower INNER_ALLOWANCE" +
                            (" (the file is gone: drop it)" if rel not in files else ""))
    assert problems == [], ("\n".join(problems) + "\n\ntoday's counts:\n" +
                            "\n".join(f'    "{f}": {n},' for f, n in sorted(counts.items())))


def eager_heavy_imports(files: dict[str, str], imports: list[Import],
                        at_top: dict[str, str]) -> list[str]:
    """Heavy libraries imported at module top outside ``at_top``, entries of ``at_top`` that
    import none, and modules of ``at_top`` imported at module top by a module outside it."""
    found = [f"{rel}:{line} imports {name} at module top (import it inside the function that "
             f"needs it)" for rel, text in files.items() if rel not in at_top
             for line, name in heavy_at_top(ast.parse(text))]
    found += [f"{rel} imports no heavy library at module top: drop it from HEAVY_AT_TOP"
              for rel in at_top if rel not in files or not heavy_at_top(ast.parse(files[rel]))]
    eager = {_module_name(rel) for rel in at_top}
    found += list(dict.fromkeys(
        f"{i.file}:{i.line} imports {i.target} at module top, which imports a heavy library "
        f"(import it inside the function that needs it)" for i in imports
        if i.target in eager and not i.inner and i.file not in at_top))
    return found


def test_heavy_libraries_are_imported_lazily():
    """A heavy library is imported at module top only in ``HEAVY_AT_TOP``, and those modules
    are imported only inside functions (but by each other): importing any other backend
    module loads no heavy library."""
    offenders = eager_heavy_imports(_backend_files(), _backend_imports(), HEAVY_AT_TOP)
    assert offenders == [], "\n".join(offenders)


# ------------------------------------------------------------------------- the scanners fail
def test_layering_rules_catch_violations():
    bad_ui = ast.parse("def f():\n    import gradio as gr\nfrom webui.context import Ctx\n")
    assert sorted(n for _, n in ui_imports(bad_ui)) == ["gradio", "webui.context"]
    bad_spawn = ast.parse(
        "import subprocess as sp, os\nfrom subprocess import Popen\nimport pty\n"
        "def f():\n    sp.run(['x'])\n    os.execv('x', ['x'])\n    pty.spawn('x')\n"
        "    os.path.join('a')\n")
    assert [w for _, w in spawn_sites(bad_spawn)] == [
        "from subprocess import Popen", "subprocess.run(...)", "os.execv(...)", "pty.spawn(...)"]
    bad_names = ast.parse(
        '"""Docs may say run.yaml."""\nSTATE = "state"\n'
        'def f(d, s):\n    return d / "logs" / f"{s}.log", f"accelerate_{s}.yaml", '
        '"output/state", d.joinpath("cache"), "deepspeed_*.json", "see commands.sh", '
        '"deepspeed_<stage>.json"\n'
        'OK = ("samples are fine", "model_index.json", "my_run.yaml.bak")\n')
    assert sorted(t for _, t in run_file_names(bad_names)) == [
        "accelerate_{}.yaml", "cache", "deepspeed_*.json", "deepspeed_<stage>.json", "logs",
        "output/state",
        "see commands.sh", "state"]


def test_import_rules_catch_violations():
    """Planted imports: upward inside a function, relative upward, sideways between stages and
    jobs, a two-module circle, a circle through a package's __init__, a module in no layer, a
    missing module, and a heavy library at module top."""
    files = {
        "backend/__init__.py": "",
        "backend/supervisor.py": "from backend.jobs.q import main\n",
        "backend/extra.py": "",
        "backend/core/__init__.py": "",
        "backend/core/low.py": "import os\ndef f():\n    from backend.planning import plan\n",
        "backend/core/twin.py": "from backend.core import low\nfrom . import low as again\n",
        "backend/core/gone.py": "class C:\n    def m(self):\n        import backend.runner\n"
                                "from ... import up\n",
        "backend/families/__init__.py": "def f():\n    from backend.config.schema import S\n",
        "backend/families/base.py": "",
        "backend/config/__init__.py": "",
        "backend/config/schema.py": "from backend.families import base\n",
        "backend/data/__init__.py": "",
        "backend/data/a.py": "from . import b\nfrom ..training.loop import step\n",
        "backend/data/b.py": "def f():\n    from backend.data.a import x\n",
        "backend/training/__init__.py": "",
        "backend/training/loop.py": "import torch\nfrom backend.core import low\n",
        "backend/planning/__init__.py": "",
        "backend/planning/plan.py": "def f():\n    import torch\n",
        "backend/stages/__init__.py": "",
        "backend/stages/s.py": "import backend.jobs.q\n",
        "backend/jobs/__init__.py": "",
        "backend/jobs/q.py": "from backend.training import loop\nmain = None\n",
    }
    imports = project_imports(files)
    assert upward_imports(imports) == [
        "backend/core/low.py:3 imports backend.planning.plan (layer core -> layer planning)",
        "backend/data/a.py:2 imports backend.training.loop (layer data -> layer training)",
        "backend/families/__init__.py:2 imports backend.config.schema "
        "(layer families -> layer config)",
        "backend/stages/s.py:1 imports backend.jobs.q (layer stages -> layer jobs)",
    ]
    assert layerless_modules(files) == [
        "backend/extra.py is in no layer: move it into one of core, families, config, models, "
        "data, training, planning, stages, jobs, publish"]
    assert missing_modules(imports) == [
        "backend/core/gone.py:3 imports backend.runner, which is no module",
        "backend/core/gone.py:4 imports ...up, which is no module"]
    assert import_circles(imports) == [
        ["backend.config.schema", "backend.families"],  # via families/__init__.py
        ["backend.data.a", "backend.data.b"],
    ]
    assert inner_project_imports(imports) == Counter({
        "backend/core/low.py": 1, "backend/core/gone.py": 1, "backend/families/__init__.py": 1,
        "backend/data/b.py": 1})
    assert eager_heavy_imports(files, imports, {"backend/core/twin.py": "stale"}) == [
        "backend/training/loop.py:1 imports torch at module top (import it inside the "
        "function that needs it)",
        "backend/core/twin.py imports no heavy library at module top: drop it from "
        "HEAVY_AT_TOP"]
    assert eager_heavy_imports(files, imports, {"backend/training/loop.py": "ok"}) == [
        "backend/data/a.py:2 imports backend.training.loop at module top, which imports a "
        "heavy library (import it inside the function that needs it)",
        "backend/jobs/q.py:1 imports backend.training.loop at module top, which imports a "
        "heavy library (import it inside the function that needs it)"]
    assert heavy_at_top(ast.parse("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    import torch\n")) == []


# ------------------------------------------------------------------------- other rules
def test_no_shell_strings_anywhere():
    offenders = []
    for p in list(ROOT.glob("*.py")) + _sources("backend", "webui", "bench", "tests"):
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if name in ("system", "popen") and isinstance(fn, ast.Attribute) and \
                        getattr(fn.value, "id", "") == "os":
                    offenders.append(f"{_rel(p)}:{node.lineno} os.{name}")
                for kw in node.keywords:
                    if kw.arg == "shell" and getattr(kw.value, "value", False) is True:
                        offenders.append(f"{_rel(p)}:{node.lineno} shell" "=True")
    assert offenders == []


def test_no_unsafe_torch_load():
    offenders = []
    for p in _sources("backend"):
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "load" and getattr(node.func.value, "id", "") == "torch":
                ok = any(kw.arg == "weights_only" and getattr(kw.value, "value", None) is True
                         for kw in node.keywords)
                if not ok:
                    offenders.append(f"{_rel(p)}:{node.lineno}")
    assert offenders == []
