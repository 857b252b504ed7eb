"""A family planted by the tests outside ``backend/families/``: Z-Image's classes under
another name, model id and title, with no test code of its own. ``ZEROLORA_FAMILY_MODULES``
names this module to register it (in the test process and every stage it starts);
``tests/test_every_family.py`` then gives it every common check.

Cheap to import, as a family's ``__init__`` must be (the schema reads it); the adapter is in
``planted_adapter.py``."""
from dataclasses import replace

from backend.families.base import FamilySpec
from backend.families.z_image import BASE, SPEC as Z_IMAGE

REPO = "Tests/Planted-Tiny"


def _here(source: str | None) -> str | None:
    return source.replace(BASE, REPO) if source else source


SPEC = FamilySpec(
    name="planted",
    title="Planted tiny family",
    adapter="tests.harness.planted_adapter",
    components=tuple(replace(c, source=_here(c.source)) for c in Z_IMAGE.components),
    defaults={**Z_IMAGE.defaults, "model_id_with_origin_paths":
              _here(Z_IMAGE.defaults["model_id_with_origin_paths"])},
    recognise_classes=(),
    keywords=("planted",),
)
