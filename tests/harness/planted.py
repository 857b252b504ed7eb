"""A family planted by the tests outside ``backend/families/``: Z-Image's classes under
another name, model id and title, with no test code of its own. ``ZEROLORA_FAMILY_MODULES``
names this module to register it (in the test process and every stage it starts);
``tests/test_every_family.py`` then gives it every common check.

Cheap to import, as a family's ``__init__`` must be (the schema reads it); the adapter is in
``planted_adapter.py``."""
from backend.families.base import FamilySpec
from backend.families.common import pipeline_components
from backend.families.z_image import SPEC as Z_IMAGE

REPO = "Tests/Planted-Tiny"
SPEC = FamilySpec(
    name="planted",
    title="Planted tiny family",
    adapter="tests.harness.planted_adapter",
    components=pipeline_components(
        transformer=(("ZImageTransformer2DModel",), f"{REPO}:transformer/*.safetensors"),
        text_encoder=(("Qwen3Model", "Qwen3ForCausalLM"), f"{REPO}:text_encoder/*.safetensors"),
        vae=(("AutoencoderKL",), f"{REPO}:vae/diffusion_pytorch_model.safetensors"),
        tokenizer=f"{REPO}:tokenizer/", scheduler=f"{REPO}:scheduler/"),
    defaults={**Z_IMAGE.defaults,
              "model_id_with_origin_paths": (f"{REPO}:transformer/*.safetensors,"
                                             f"{REPO}:text_encoder/*.safetensors,"
                                             f"{REPO}:vae/diffusion_pytorch_model.safetensors")},
    recognise_classes=(),
    keywords=("planted",),
)
