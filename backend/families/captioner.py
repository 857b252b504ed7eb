"""A transformers vision-language model as a ``Captioner`` (``backend/families/base.py``).

Generic for any transformers vision-language model and its processor: a family whose text
encoder is one (``Family.load_captioner``) and a ``captioner_path`` model folder
(``backend.data.captions.load_captioner``) both caption through ``VLMCaptioner``. torch and
accelerate load when a captioner is built, not when this module is imported.
"""
from __future__ import annotations

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
        tokenizer = getattr(self.processor, "tokenizer", None)
        if getattr(tokenizer, "chat_template", None) or (
                getattr(self.processor, "chat_template", None)):
            messages = [{"role": "user", "content": [{"type": "image"},
                                                     {"type": "text", "text": instruction}]}]
            return self.processor.apply_chat_template(messages, tokenize=False,
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
