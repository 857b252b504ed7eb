"""The family registry: every folder under ``backend/families/`` with a ``SPEC`` is a family.

Cheap to import (plain data; torch loads only with an adapter):

    family_names()            -> (name, ...)          the schema's model_family choices
    family_spec(name)         -> FamilySpec            components, defaults, recognition
    get_family(name)          -> Family                the adapter (imports its module)
    recognise(sources, paths) -> (family, variant)     from the files a command names
    family_of(options)        -> (family, variant name) of a mapping of run options
    foreign_sources(family, sources, paths, tokenizer)
                              -> [(field, entry, ...)]  a run's sources of another family

The contract itself is in ``backend/families/base.py``. A family kept elsewhere is a module
with a ``SPEC`` named in the environment variable ``ZEROLORA_FAMILY_MODULES``.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core import libraries
from backend.families.base import Component, FamilySpec, Variant

if TYPE_CHECKING:
    from backend.families.base import Family

__all__ = ["Component", "FamilySpec", "Variant", "family_names", "family_spec", "get_family",
           "default_family", "family_of", "foreign_sources", "recognise", "register"]

_SPECS: dict[str, FamilySpec] = {}


# Families kept outside this folder: modules (comma-separated) each with a ``SPEC``, read once
# per process, so the stage processes a run starts know them too (they inherit it).
EXTRA_FAMILIES_ENV = "ZEROLORA_FAMILY_MODULES"


def _discover() -> dict[str, FamilySpec]:
    if not _SPECS:
        here = Path(__file__).parent
        names = [f"{__name__}.{info.name}" for info in
                 sorted(pkgutil.iter_modules([str(here)]), key=lambda i: i.name) if info.ispkg]
        extra = [m.strip() for m in os.environ.get(EXTRA_FAMILIES_ENV, "").split(",")
                 if m.strip()]
        for name in names + extra:
            spec = getattr(importlib.import_module(name), "SPEC", None)
            if isinstance(spec, FamilySpec):
                _SPECS[spec.name] = spec
            elif name in extra:
                raise ValueError(f"{EXTRA_FAMILIES_ENV}: module {name} has no FamilySpec "
                                 f"named SPEC")
    return _SPECS


def register(spec: FamilySpec) -> None:
    """Add a family defined outside this folder (tests); the schema's choices are fixed
    when ``backend.config.schema`` is imported, so register before that."""
    _discover()[spec.name] = spec


def family_names() -> tuple[str, ...]:
    """Family names, the default first."""
    specs = _discover()
    default = default_family()
    return (default,) + tuple(n for n in specs if n != default)


def default_family() -> str:
    """The family a config without ``model_family`` (and unrecognised sources) gets."""
    specs = _discover()
    return next((n for n, s in specs.items() if s.is_default), next(iter(specs)))


def family_spec(name: str) -> FamilySpec:
    specs = _discover()
    if name not in specs:
        raise ValueError(f"model_family: unknown family (got {name!r}; allowed "
                         f"{' | '.join(specs)})")
    return specs[name]


def get_family(name: str) -> "Family":
    """The adapter of family ``name`` (imports its module, and so torch)."""
    adapter = _adapter(name)
    if libraries.is_threaded() and name not in _READY:
        with libraries.locked():
            if name not in _READY:
                # The classes the family's folders name, resolved now and under the lock:
                # the adapter's own ``from diffusers import ...`` then only reads attributes.
                libraries.load()
                for component in adapter.spec.components:
                    for class_name in component.classes:
                        try:
                            libraries.model_class(class_name)
                        except AttributeError:
                            pass
                adapter.transformer_class()
                _READY.add(name)
    return adapter


_READY: set[str] = set()


@lru_cache(maxsize=None)
def _adapter(name: str) -> "Family":
    spec = family_spec(name)
    with libraries.locked():  # one thread imports an adapter module at a time
        adapter = importlib.import_module(spec.adapter).Adapter()
    adapter.spec = spec
    return adapter


# ------------------------------------------------------------------------------------------
# Recognition from the files a command names
# ------------------------------------------------------------------------------------------
def _class_names(path: Path) -> list[str]:
    """``_class_name`` / ``architectures`` of a pipeline, component folder or file."""
    folder = path if path.is_dir() else path.parent
    found: list[str] = []
    for candidate in (folder / "model_index.json", folder / "config.json",
                      folder / "transformer" / "config.json"):
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            found += [data.get("_class_name")] + list(data.get("architectures") or [])
    return [n for n in found if isinstance(n, str)]


def recognise(sources: str | None, model_paths: str | None = None
              ) -> tuple[str, Variant | None] | None:
    """(family, variant) named by model sources (``model_id:glob`` entries or local paths)
    and ``model_paths`` (a JSON list): a known model id first, else the ``_class_name`` in
    the files' configs. None when nothing is recognised."""
    specs = _discover()
    entries = [e.strip() for e in (sources or "").split(",") if e.strip()]
    files: list[str] = []
    if model_paths:
        try:
            for item in json.loads(model_paths):
                files += item if isinstance(item, list) else [item]
        except (ValueError, TypeError):
            pass
    for entry in entries:
        if Path(entry).expanduser().exists():
            files.append(entry)
            continue
        model_id = entry.rsplit(":", 1)[0] if ":" in entry else entry
        for spec in specs.values():
            if model_id in spec.model_ids():
                return spec.name, spec.variant_of(model_id)
    for f in files:
        # The pipeline's class (model_index.json) first: it names the variant too, or with
        # a value only one variant's pipeline (or one of its components' configs) sets.
        path = Path(str(f)).expanduser()
        index = _model_index(path)
        for n in _class_names(path):
            for spec in specs.values():
                if n in spec.recognise_classes:
                    # A class two families share: the other components name the family.
                    named = _by_components(spec, n, files, specs)
                    by_value = [v for v in named.variants if _named_by_values(v, index, files)]
                    # A component folder's own class is shared: its pipeline's names it.
                    names = (n, index.get("_class_name"))
                    return named.name, next(iter(by_value), None) or next(
                        (v for v in named.variants if any(c in v.classes for c in names)), None)
    return None


def _by_components(spec: FamilySpec, name: str, files: list[str],
                   specs: dict[str, FamilySpec]) -> FamilySpec:
    """``spec``, or, when the class ``name`` is a component of several families (one
    trained component in two pipelines), the one of them whose other components the local
    ``files`` name: the classes of the files' folders and of the component folders beside
    them (a text encoder). ``spec`` when none is named more."""
    sharing = [spec] + [s for s in specs.values() if s is not spec and name in s.class_map()]
    if len(sharing) < 2:
        return spec
    found: set[str] = set()
    for f in files:
        found.update(_class_names(Path(str(f)).expanduser()))
    for component in {c.name for s in sharing for c in s.components}:
        config = _component_config(files, component)
        found.update([config.get("_class_name")] + list(config.get("architectures") or []))
    common = set.intersection(*(set(s.class_map()) for s in sharing))
    return max(sharing, key=lambda s: len((set(s.class_map()) - common) & found))


def _component_classes(path: Path) -> list[str]:
    """The component classes of a local model: its folder's ``config.json`` (a component
    folder, or the folder of a weight file), and for a pipeline folder each component
    folder's. The pipeline's own class is not one (a family may run another's pipeline
    when their components are the same)."""
    folder = path if path.is_dir() else path.parent
    files = [folder / "config.json"]
    if (folder / "model_index.json").is_file():
        files += sorted(folder.glob("*/config.json"))
    found: list[str] = []
    for candidate in files:
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            found += [data.get("_class_name")] + list(data.get("architectures") or [])
    return [n for n in found if isinstance(n, str)]


def foreign_sources(family: str, sources: str | None, model_paths: str | None = None,
                    tokenizer_path: str | None = None) -> list[tuple[str, str, str, str]]:
    """The model sources of a ``family`` run that belong to another family, each as (field,
    entry, the other family's title, an example of this family's source): a model id only
    other families name (``model_id_with_origin_paths``, ``tokenizer_path``), or a local
    component folder (or a pipeline folder holding one) whose class only other families'
    components have (another family's text encoder beside this family's transformer).
    Sources no family knows are not judged here (the hub says what it cannot
    recognise)."""
    specs = _discover()
    own = specs.get(family)
    if own is None:
        return []
    ids = set(own.model_ids())

    def other_by_id(model_id: str) -> FamilySpec | None:
        if model_id in ids:
            return None
        return next((s for s in specs.values() if model_id in s.model_ids()), None)

    def other_by_class(path: Path) -> FamilySpec | None:
        for n in _component_classes(path):
            owners = [s for s in specs.values() if n in s.class_map()]
            if owners and own not in owners:
                return owners[0]
        return None

    def example(entry: str) -> str:
        component = entry.rpartition(":")[2].split("/")[0] if ":" in entry else \
            Path(entry).name
        names = [c.name for c in own.components]
        source = own.default_source(component) if component in names else None
        return source or next(iter(str(own.defaults.get("model_id_with_origin_paths", "")
                                       ).split(",")), "")

    found: list[tuple[str, str, str, str]] = []
    entries = [("model_id_with_origin_paths", e.strip()) for e in (sources or "").split(",")
               if e.strip()]
    if tokenizer_path and tokenizer_path.strip():
        entries.append(("tokenizer_path", tokenizer_path.strip()))
    try:
        listed = json.loads(model_paths) if model_paths else []
    except (ValueError, TypeError):
        listed = []
    for item in listed if isinstance(listed, list) else []:
        for f in (item if isinstance(item, list) else [item]):
            if isinstance(f, str):
                entries.append(("model_paths", f))
    for field, entry in entries:
        path = Path(entry).expanduser()
        if path.exists():
            other = other_by_class(path)
        elif field == "model_paths" or ":" not in entry:
            other = None
        else:
            other = other_by_id(entry.rsplit(":", 1)[0])
        if other is not None:
            found.append((field, entry, other.title, example(entry)))
    return found


def family_of(data: dict[str, Any]) -> tuple[str, str | None]:
    """(family, variant) of a mapping of options: ``model_family`` when given (its variant
    from the sources), else recognised from the model sources, else the default family."""
    found = recognise(data.get("model_id_with_origin_paths")
                      if isinstance(data.get("model_id_with_origin_paths"), str) else None,
                      data.get("model_paths") if isinstance(data.get("model_paths"), str)
                      else None)
    given = data.get("model_family")
    if isinstance(given, str) and given in family_names():
        variant = found[1] if found and found[0] == given and found[1] else None
        return given, variant.name if variant else None
    if found:
        return found[0], found[1].name if found[1] else None
    return default_family(), None


def _named_by_values(variant: Variant, index: dict, files: list[str]) -> bool:
    """Whether a local model names ``variant`` by value: every one of its
    ``index_values`` in the pipeline's model_index.json, or every one of its
    ``config_values`` in the component configs beside the model's files."""
    if variant.index_values and all(index.get(k) == want
                                    for k, want in variant.index_values.items()):
        return True
    if not variant.config_values:
        return False
    for component, values in variant.config_values.items():
        config = _component_config(files, component)
        if not all(config.get(k) == want for k, want in values.items()):
            return False
    return True


def _component_config(files: list[str], component: str) -> dict:
    """The config.json of ``component`` beside any of the local ``files`` (a pipeline
    folder, a component folder, or a file in one): ``<root>/<component>/config.json`` for
    the file's folder and the two above it, or the folder itself when it is named
    ``component``; {} when none is found."""
    for f in files:
        path = Path(str(f)).expanduser()
        folder = path if path.is_dir() else path.parent
        candidates = [root / component / "config.json"
                      for root in (folder, folder.parent, folder.parent.parent)]
        if folder.name == component:
            candidates.insert(0, folder / "config.json")
        for candidate in candidates:
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
    return {}


def _model_index(path: Path) -> dict:
    """The model_index.json of the pipeline folder ``path`` is, or is in (a component folder,
    or a file in one); {} when there is none."""
    folder = path if path.is_dir() else path.parent
    for root in (folder, folder.parent, folder.parent.parent):
        try:
            data = json.loads((root / "model_index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return data if isinstance(data, dict) else {}
    return {}
