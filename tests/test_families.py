"""The family contract: every family folder is complete, nothing else names a family, the
schema takes its choices and defaults from the registry, and the form switches families
without losing what the user typed."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from backend.config.meta import field_meta
from backend.config.schema import FIELDS, family_defaults
from backend.config.validation import validate
from backend.families import (FamilySpec, _discover, family_names, family_of, family_spec,
                              get_family, recognise)
from backend.families.base import Family

REPO = Path(__file__).resolve().parent.parent
FAMILIES_DIR = REPO / "backend" / "families"


def _own_words(spec: FamilySpec) -> set[str]:
    """What names a family: its name, keywords, pipeline and trained-component classes and
    model ids. The other components' classes are shared library classes (a VAE class, a
    text encoder several families use), so they name no family."""
    words = {spec.name, *spec.keywords, *spec.recognise_classes, *spec.model_ids()}
    words |= {cls for c in spec.components if c.trained for cls in c.classes}
    return {w for w in words if w}


def _words(spec: FamilySpec) -> list[str]:
    """A family's own words, less the ones another family shares."""
    shared = set().union(*(_own_words(s) for s in _discover().values() if s is not spec))
    return sorted(_own_words(spec) - shared)


def _pattern(spec: FamilySpec) -> re.Pattern:
    """The words as whole words: ``AutoencoderKL`` is not found in ``AutoencoderKLFoo``, a
    keyword ``qwen`` not in ``Qwen3Model`` (another family's text encoder)."""
    return re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(w)}(?![A-Za-z0-9])"
                               for w in _words(spec)), re.IGNORECASE)


def _longer_words(spec: FamilySpec) -> re.Pattern:
    """Other families' words that hold one of this family's (``qwen_image_21`` and
    ``Qwen/Qwen-Image-2.1`` hold ``qwen_image`` and ``Qwen/Qwen-Image``): taken out of a line
    before the scan, they name the other family, not this one."""
    mine = {w.lower() for w in _own_words(spec)}
    longer = {w for s in _discover().values() if s is not spec for w in _own_words(s)
              if w.lower() not in mine and any(m in w.lower() for m in mine)}
    return re.compile("|".join(re.escape(w) for w in sorted(longer, key=len, reverse=True))
                      or "(?!)", re.IGNORECASE)


def _python_files() -> list[Path]:
    files = sorted((REPO / "backend").rglob("*.py")) + sorted((REPO / "webui").rglob("*.py"))
    return files + [REPO / "launch.py"]


@pytest.mark.parametrize("name", family_names())
def test_no_family_is_named_outside_its_folder(name):
    """backend/, webui/ and launch.py name no family, its classes or model ids, except in
    the family's own folder (presets, tests, docs and the per-family bench scripts may)."""
    spec = family_spec(name)
    own = FAMILIES_DIR / name
    pattern = _pattern(spec)
    longer = _longer_words(spec)
    offenders = []
    for path in _python_files():
        if own in path.parents:
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(longer.sub(" ", line)):
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:100]}")
    assert not offenders, "family names outside the family's folder:\n" + "\n".join(offenders)


def test_the_layering_scan_finds_a_planted_name(tmp_path):
    """The scan above would catch a class name in another module (it is not vacuous)."""
    spec = family_spec(family_names()[0])
    word = next(cls for c in spec.components for cls in c.classes)
    pattern = _pattern(spec)
    assert pattern.search(f"from diffusers import {word}")
    assert pattern.search(f"family = '{spec.name}'")
    assert not pattern.search("from diffusers import AutoencoderKL")


@pytest.mark.parametrize("name", family_names())
def test_every_family_implements_the_contract(name):
    spec = family_spec(name)
    adapter = get_family(name)
    assert isinstance(adapter, Family) and adapter.spec is spec
    assert not inspect.isabstract(type(adapter))
    assert sum(c.trained for c in spec.components) == 1
    assert set(spec.defaults) <= set(FIELDS), set(spec.defaults) - set(FIELDS)
    for stage in ("data_process", "train", "sample"):
        assert spec.stage_components(stage), stage
    for comp in spec.components:
        assert comp.source is None or ":" in comp.source, comp
    # The adapters that bind a run subclass the family's adapter and say when they do.
    for name in spec.run_adapters:
        module, _, cls = name.partition(":")
        bound = getattr(importlib.import_module(module), cls)
        assert issubclass(bound, type(adapter)) and inspect.getdoc(bound.for_run), name
    # Each member of the contract has a docstring (the contract is written down).
    for member, value in vars(Family).items():
        if callable(value) and not member.startswith("_"):
            assert inspect.getdoc(value), f"Family.{member} has no docstring"
    # Published configs build the trained component's module map (the export check).
    shapes = adapter.lora_module_map()
    targets = spec.defaults.get("lora_target_modules", FIELDS["lora_target_modules"].default)
    for target in adapter.target_modules(t.strip() for t in targets.split(",")):
        assert any(n == target or n.endswith("." + target) for n in shapes), target


@pytest.mark.parametrize("name", family_names())
def test_family_presets_load_as_that_family(name):
    from backend.config.presets import load_preset

    for preset in family_spec(name).presets_by_vram:
        assert load_preset(preset).model_family == name, preset


def test_schema_choices_and_defaults_come_from_the_registry():
    assert field_meta("model_family")["choices"] == list(family_names())
    default = family_spec(family_names()[0])
    for field, value in default.defaults.items():
        assert FIELDS[field].default == value, field


def test_family_is_recognised_from_the_files_a_command_names(tiny_model_dir):
    spec = family_spec(family_names()[0])
    model_id = spec.model_ids()[0]
    assert recognise(f"{model_id}:transformer/*.safetensors")[0] == spec.name
    # A local folder: the _class_name in its model_index.json / config.json.
    assert recognise(str(tiny_model_dir))[0] == spec.name
    assert recognise(str(tiny_model_dir / "transformer"))[0] == spec.name
    assert recognise("someone/unknown-model:transformer/*.safetensors") is None
    assert family_of({"model_id_with_origin_paths": str(tiny_model_dir)})[0] == spec.name


@pytest.fixture
def second_family():
    """A second family in the registry, for the rules that need two (data only)."""
    base = family_spec(family_names()[0])
    spec = FamilySpec(
        name="test_second", title="Second", adapter=base.adapter,
        components=base.components, recognise_classes=("SecondTestPipeline",),
        defaults={**base.defaults, "lora_target_modules": "to_q,to_k",
                  "sample_steps": 8, "sample_cfg": 1.0},
        keywords=("test_second",))
    _discover()[spec.name] = spec
    yield spec
    _discover().pop(spec.name)


def test_a_config_stores_differences_from_its_own_family(second_family):
    defaults = family_defaults("test_second")
    assert defaults["lora_target_modules"] == "to_q,to_k" and defaults["sample_steps"] == 8
    base = family_defaults(family_names()[0])
    # A field the second family changes keeps the value the user gave.
    assert base["sample_steps"] != 8


def test_switching_family_in_the_form_keeps_what_the_user_typed(second_family):
    pytest.importorskip("gradio")
    from webui.form import Form

    form = Form()
    first = family_names()[0]
    old = family_defaults(first)
    values = {"lora_target_modules": old["lora_target_modules"],   # untouched: switches
              "sample_steps": 12,                                   # typed: stays
              "sample_cfg": old["sample_cfg"], "lora_rank": old["lora_rank"]}
    changed = form.family_switch(values, first, "test_second")
    assert changed == {"lora_target_modules": "to_q,to_k", "sample_cfg": 1.0}
    # And back: the second family's values return to the first's.
    back = form.family_switch({"lora_target_modules": "to_q,to_k", "sample_steps": 8},
                              "test_second", first)
    assert back == {"lora_target_modules": old["lora_target_modules"],
                    "sample_steps": old["sample_steps"]}


def test_recognised_family_changes_the_defaults_a_command_leaves_out(second_family,
                                                                     tmp_path):
    """A reference command names only files: their _class_name picks the family, whose
    defaults fill what the command leaves out; an explicit model_family overrides."""
    folder = tmp_path / "pipe"
    folder.mkdir()
    (folder / "model_index.json").write_text('{"_class_name": "SecondTestPipeline"}')
    cfg = validate({"model_id_with_origin_paths": str(folder), "dataset_base_path": "d"})
    assert cfg.model_family == "test_second" and cfg.lora_target_modules == "to_q,to_k"
    assert cfg.to_dict(only_changed=True).keys() >= {"model_family"}
    assert "lora_target_modules" not in cfg.to_dict(only_changed=True)
    # Given explicitly, the user's family wins over the files'.
    first = family_names()[0]
    cfg = validate({"model_id_with_origin_paths": str(folder), "dataset_base_path": "d",
                    "model_family": first})
    assert cfg.model_family == first
    assert cfg.lora_target_modules == family_defaults(first)["lora_target_modules"]


def test_no_stage_imports_another_stage():
    """Stages share only files: no module of backend/stages imports another stage, and
    the export does not import a stage."""
    stages = {p.stem for p in (REPO / "backend" / "stages").glob("*.py")} - {"__init__"}
    offenders = []
    for path in list((REPO / "backend" / "stages").glob("*.py")) + [
            REPO / "backend" / "models" / "export.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                parts = n.split(".")
                if parts[:2] == ["backend", "stages"] and len(parts) > 2 and \
                        parts[2] in stages and parts[2] != path.stem:
                    offenders.append(f"{path.relative_to(REPO)}: {n}")
    assert not offenders, offenders


RACE = r"""
import sys, tempfile, threading, traceback
from backend.core import libraries
from backend.config.schema import RunConfig
from backend.planning.estimator import estimate_memory
from backend.families import get_family
from backend.planning.plan import plan_run

libraries.threaded()  # as the app says at its start
start, errors = threading.Barrier(4), []

def run(fn):
    start.wait()
    try:
        fn()
    except Exception:
        errors.append(traceback.format_exc())

estimate = lambda: estimate_memory(RunConfig(model_family="qwen_image"))
lora_map = lambda: get_family("qwen_image").transformer_class()
# the Training tab's preview: the run's accelerate files, written by accelerate's own classes
preview = lambda: plan_run(RunConfig(model_family="qwen_image",
                                     dataset_base_path=tempfile.mkdtemp()),
                           tempfile.mkdtemp(), cuda=False)
threads = [threading.Thread(target=run, args=(f,))
           for f in (estimate, lora_map, preview, preview)]
[t.start() for t in threads]
[t.join() for t in threads]
print("\n".join(errors))
sys.exit(1 if errors else 0)
"""


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_two_threads_reach_the_model_classes_at_once():
    """The app answers an estimate, a Start and two previews of the run's files at the same
    moment in a fresh process: each gets its model class or accelerate's config classes (no
    half-imported library: ``cannot import name ...``)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", RACE], cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


# ------------------------------------------------------------------------------------------
# The contract holds only what is used
# ------------------------------------------------------------------------------------------
CONTRACT_CLASSES = ("Family", "FamilySpec", "Variant", "Component")
# Members read only by a test, and the test that reads them.
READ_BY_TESTS = {"keywords": "tests/test_layering.py"}


def _contract_members(source: str) -> dict[str, set[str]]:
    """{class: names} of what each contract class in ``source`` defines in its body (fields,
    class attributes, methods, properties), dunders left out."""
    out: dict[str, set[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in CONTRACT_CLASSES:
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
            out[node.name] = {n for n in names if not n.startswith("__")}
    return out


def _reads(source: str) -> set[str]:
    """Every attribute name ``source`` reads (``x.name``, ``getattr(x, "name")``), except
    ``super().name``, which reads the member it overrides. Definitions (a ``def``, a class
    attribute, a keyword of a constructor) and stores (``self.name = ...``) are not reads."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            call = node.value
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "super":
                continue
            names.add(node.attr)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) in
              ("getattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant)):
            names.add(node.args[1].value)
    return names


def _unused_members(base_source: str, sources: list[str]) -> list[str]:
    members = _contract_members(base_source)
    read = set().union(*(_reads(s) for s in sources))
    return sorted(f"{cls}.{name}" for cls, names in members.items() for name in names
                  if name not in read and name not in READ_BY_TESTS)


def test_every_contract_member_is_used():
    """Each member of ``Family``, ``FamilySpec``, ``Variant`` and ``Component`` is read
    somewhere in backend/ or webui/ (the stages, the registry, another member's default,
    a family's code) other than where it is defined: a member the rest never reads is
    removed, not left as a promise the contract does not keep. The check is by name, so a
    same-named attribute elsewhere hides a dead member; it still catches a name nothing reads
    (``pack_latents``, a spec's ``help`` before they were removed)."""
    base_source = (FAMILIES_DIR / "base.py").read_text(encoding="utf-8")
    sources = [p.read_text(encoding="utf-8") for p in _python_files()]
    assert not _unused_members(base_source, sources)
    for name, test in READ_BY_TESTS.items():
        assert name in _reads((REPO / test).read_text(encoding="utf-8")), (name, test)


def test_the_unused_member_check_finds_a_planted_member():
    """A member defined in the contract and overridden by a family, but never read, fails
    the check above; once read (even by getattr) it passes."""
    base_source = (FAMILIES_DIR / "base.py").read_text(encoding="utf-8")
    planted = base_source.replace(
        "class Family(abc.ABC):\n",
        "class Family(abc.ABC):\n    def never_read_member(self, latents):\n"
        "        return latents\n    never_read_field: int = 0\n", 1)
    family = ("class Adapter(Family):\n    never_read_field = 1\n"
              "    def never_read_member(self, latents):\n"
              "        return super().never_read_member(latents)\n")
    sources = [p.read_text(encoding="utf-8") for p in _python_files()]
    assert _unused_members(planted, sources + [family]) == [
        "Family.never_read_field", "Family.never_read_member"]
    reader = "x = family.never_read_member(1)\ny = getattr(family, 'never_read_field')\n"
    assert _unused_members(planted, sources + [family, reader]) == []


@pytest.mark.parametrize("name", family_names())
def test_every_family_and_variant_declares_its_title(name):
    """The title that messages name a model by (``Family.title``): the family's, or the
    variant's for an adapter bound to a run."""
    spec = family_spec(name)
    adapter = get_family(name)
    assert spec.title and adapter.title == spec.title
    assert all(v.title for v in spec.variants)
    for entry in spec.run_adapters:
        module, _, cls = entry.partition(":")
        bound = getattr(importlib.import_module(module), cls)
        assert isinstance(bound.title, str) and bound.title, entry


@pytest.mark.parametrize("name", family_names())
def test_every_component_a_stage_loads_has_a_loader(name):
    """``Family.load_encoder`` / ``load_pipeline`` build from the spec's components: each
    component stage 1 or the samples load, other than the trained one, has a loader, and the
    adapter names the encoder and the pipeline class."""
    spec = family_spec(name)
    adapter = get_family(name)
    for stage in ("data_process", "sample"):
        missing = [c for c in spec.stage_components(stage)
                   if c != spec.trained_component and c not in adapter.loaders]
        assert not missing, (stage, missing)
    assert isinstance(adapter.encoder, type) and adapter.pipeline
