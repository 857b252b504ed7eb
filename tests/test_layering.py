"""Architecture rules that keep the product maintainable and safe, each checked on the AST.

- ``backend/`` never imports the UI (``gradio``, ``webui``).
- Nothing but the process module (``backend/jobs/processes.py``) starts a process in
  ``backend/`` and ``webui/``; ``launch.py``'s bootstrap is the one allowed exception.
- No module but ``backend/core/rundir.py`` names a run file or folder (the names come from
  rundir.py itself, so a name added there extends the rule).
- No shell strings; no unsafe ``torch.load``.

Each rule reports every offending file and line. ``test_layering_rules_catch_violations``
proves the scanners fail on a planted violation.
"""
import ast
import re
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
