"""Architecture rules that keep the product maintainable and safe."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_backend_never_imports_the_ui():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "backend").rglob("*.py")
                 if _imports(p) & {"gradio", "webui", "gradio_client"}]
    assert offenders == []


def test_no_shell_strings_anywhere():
    offenders = []
    for p in list(ROOT.glob("*.py")) + [q for d in ("backend", "webui", "bench", "tests")
                                         for q in (ROOT / d).rglob("*.py")]:
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if name in ("system", "popen") and isinstance(fn, ast.Attribute) and \
                        getattr(fn.value, "id", "") == "os":
                    offenders.append(f"{p.relative_to(ROOT)}:{node.lineno} os.{name}")
                for kw in node.keywords:
                    if kw.arg == "shell" and getattr(kw.value, "value", False) is True:
                        offenders.append(f"{p.relative_to(ROOT)}:{node.lineno} shell" "=True")
    assert offenders == []


def test_no_unsafe_torch_load():
    offenders = []
    for p in (ROOT / "backend").rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "load" and getattr(node.func.value, "id", "") == "torch":
                ok = any(kw.arg == "weights_only" and getattr(kw.value, "value", None) is True
                         for kw in node.keywords)
                if not ok:
                    offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
