"""A transformers vision-language model as a ``Captioner`` (``backend/families/base.py``).

Generic for any transformers vision-language model and its processor: a family whose text
encoder is one (``Family.load_captioner``) and a ``captioner_path`` model folder
(``backend.data.captions.load_captioner``) both caption through ``VLMCaptioner``. torch and
accelerate load when a captioner is built, not when this module is imported.

What the families whose text encoder is a Qwen vision-language model share to build its
processor without torchvision (Qwen2.5-VL's, ``qwen3_vl.py``): the processor class with its
absent video processor unchecked (``image_only_processor_class``) and where a tokenizer
folder's image settings are (``processor_config_file``).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

# Images are shown to the model at no more than this area (aspect kept): about 750 image
# tokens for a Qwen2.5-VL, plenty for a caption.
IMAGE_AREA = 768 * 768


def fit_area(image, area: int = IMAGE_AREA):
    """``image`` (PIL) shrunk to at most ``area`` pixels, aspect kept (never enlarged)."""
    w, h = image.size
    if w * h <= area:
        return image
    scale = (area / (w * h)) ** 0.5
    return image.resize((max(1, int(w * scale)), max(1, int(h * scale))))


@lru_cache(maxsize=None)
def image_only_processor_class(name: str):
    """transformers' processor class ``name`` (``Qwen2VLProcessor``, ``Qwen3VLProcessor``)
    for images and text only. Its constructor checks each part's class, and without
    torchvision the video processor's class cannot be looked up; this subclass skips the
    check of an absent video processor (``video_processor=None``) and nothing else."""
    import transformers

    base = getattr(transformers, name)

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument is None and argument_name == "video_processor":
            return None
        return base.check_argument_for_proper_class(self, argument_name, argument)

    return type(f"ImageOnly{name}", (base,),
                {"check_argument_for_proper_class": check_argument_for_proper_class,
                 "__doc__": f"``{name}`` without a video processor."})


def processor_config_file(tokenizer_dir: str | Path) -> Path | None:
    """The ``preprocessor_config.json`` that goes with a tokenizer folder, if any: in it,
    or in a ``processor/`` folder beside it (as some pipelines keep their processor)."""
    folder = Path(tokenizer_dir)
    for candidate in (folder / "preprocessor_config.json",
                      folder.parent / "processor" / "preprocessor_config.json"):
        if candidate.is_file():
            return candidate
    return None


class VLMCaptioner:
    """A transformers vision-language model and its processor as a ``Captioner``: batched
    greedy generation, the prompt from the tokenizer's chat template (else
    ``chat_format``, a string with one ``{}`` for the instruction)."""

    def __init__(self, model, processor, *, device: Any = "cpu", offload: str = "none",
                 chat_format: str | None = None):
        import torch

        self.model, self.processor, self.chat_format = model.eval(), processor, chat_format
        self.device = torch.device(device)
        if offload == "sequential" and self.device.type != "cpu":
            from accelerate import cpu_offload

            cpu_offload(self.model, execution_device=self.device)
        else:
            self.model.to(self.device)
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.padding_side = "left"  # batched generation continues every row's end

    def prompt(self, instruction: str) -> str:
        """The prompt text: the processor's chat template, else its tokenizer's (a processor
        built from its parts may hold none of its own), else ``chat_format``."""
        tokenizer = getattr(self.processor, "tokenizer", None)
        messages = [{"role": "user", "content": [{"type": "image"},
                                                 {"type": "text", "text": instruction}]}]
        for owner in (self.processor, tokenizer):
            if getattr(owner, "chat_template", None):
                return owner.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)
        if not self.chat_format:
            raise ValueError("captioner_path: the model's processor has no chat template")
        return self.chat_format.format(instruction)

    def caption(self, images: list, instruction: str, max_new_tokens: int) -> list[str]:
        import torch

        images = [fit_area(im.convert("RGB")) for im in images]
        text = self.prompt(instruction)
        inputs = self.processor(text=[text] * len(images), images=images, padding=True,
                                return_tensors="pt")
        inputs = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in inputs.items()}
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=int(max_new_tokens),
                                      do_sample=False)
        new = out[:, inputs["input_ids"].shape[1]:]
        return self.processor.batch_decode(new, skip_special_tokens=True)
