"""The suite's own shape: no test module imports another (or the conftest); what several
modules share lives in ``tests/harness/``, where no module imports a test module either."""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# A test module named in code: an import, or the source of a subprocess (a string).
NAMED_IN_TEXT = re.compile(r"\b(?:from|import)\s+tests\.(test_\w+|conftest)\b")


def cross_imports(files: dict[str, str]) -> list[str]:
    """``file:line names module`` for every import of a test module or the conftest, in any
    scope, and every such import written in a string (a script a test runs)."""
    found = []
    for rel, text in sorted(files.items()):
        for node in ast.walk(ast.parse(text)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [f"tests.{m}" for m in NAMED_IN_TEXT.findall(node.value)]
            for name in names:
                parts = name.split(".")
                if (len(parts) > 1 and parts[0] == "tests"
                        and (parts[1].startswith("test_") or parts[1] == "conftest")):
                    found.append(f"{rel}:{node.lineno} names {'.'.join(parts[:2])}")
                    break
    return found


def suite_files() -> dict[str, str]:
    """Every test module but this one (whose planted examples would count), the conftest and
    the harness."""
    paths = [*TESTS.glob("test_*.py"), TESTS / "conftest.py", *TESTS.glob("harness/*.py")]
    return {str(p.relative_to(TESTS)): p.read_text(encoding="utf-8") for p in paths
            if p != Path(__file__).resolve()}


def test_no_test_module_imports_another():
    found = cross_imports(suite_files())
    assert found == [], ("move what is shared into tests/harness/ and import it from there:\n"
                         + "\n".join(found))


def test_the_check_finds_a_planted_import_in_every_form():
    planted = {
        "test_a.py": "from tests.test_b import helper\n",
        "test_c.py": "def f():\n    import tests.conftest\n",
        "harness/x.py": "from tests import test_b\n",
        "test_d.py": "SCRIPT = 'import sys\\nfrom tests.test_runner import fake\\n'\n",
        "test_ok.py": "from tests.harness.stages import run_stage\nimport tests.fake_stage\n",
    }
    assert cross_imports(planted) == ["harness/x.py:1 names tests.test_b",
                                      "test_a.py:1 names tests.test_b",
                                      "test_c.py:2 names tests.conftest",
                                      "test_d.py:1 names tests.test_runner"]
