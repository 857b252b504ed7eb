"""Tiny real-architecture Qwen-Image pipeline, built locally in seconds.

The components are the real classes (diffusers' ``QwenImageTransformer2DModel`` and
``AutoencoderKLQwenImage``, transformers' ``Qwen2_5_VLForConditionalGeneration`` and
``Qwen2Tokenizer``, ``FlowMatchEulerDiscreteScheduler``) at toy sizes, with random
weights from fixed seeds, saved in the hub layout::

    OUT_DIR/model_index.json
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

so ``QwenImagePipeline.from_pretrained(OUT_DIR)`` and each component's own
``from_pretrained(OUT_DIR, subfolder=...)`` load it. Weights are safetensors only.
Random weights render noise; ``backend.families.qwen_image.demo`` trains this model into one that draws.

Run:
    python -m backend.families.qwen_image.tiny OUT_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from backend.families.common import bpe_vocab_and_merges, save_tiny_pipeline, train_byte_level_bpe
from backend.families.qwen_image.qwen_vl import load_processor

# Qwen-Image's prompt template (diffusers' QwenImagePipeline.prompt_template_encode); the
# pipeline drops its first PROMPT_TEMPLATE_DROP tokens. The tiny tokenizer is trained so
# that this prefix is also exactly 34 tokens, as with the real tokenizer.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
PROMPT_TEMPLATE_DROP = 34

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Words of the demo captions (backend.families.qwen_image.demo) so they are whole tokens.
COLOURS = ["red", "green", "blue", "yellow", "purple", "magenta", "orange", "black", "white", "gray"]
SHAPES = ["circle", "square", "triangle", "shape", "shapes"]
VOCAB_SENTENCES = [
    PROMPT_TEMPLATE.format("a photo of a cat"),
    "a red circle on a white background",
    "a green square on a white background",
    "a blue triangle on a white background",
    "a yellow circle on a black background",
    "a small big large tiny shape in the center, zlr style, zerolora, checkerboard pattern",
    "a picture an image of the a and with on in at, left right top bottom middle",
    " ".join(COLOURS),
    " ".join(SHAPES),
    "zlr style zlr style zlr style checkerboard checkered striped dotted plain",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
TOKENIZER_VOCAB_SIZE = 1024  # upper bound for BPE training; the text encoder's vocab is 1024

# Real Qwen-Image scheduler config (Qwen/Qwen-Image scheduler/scheduler_config.json).
SCHEDULER_CONFIG = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    invert_sigmas=False,
    max_image_seq_len=8192,
    max_shift=0.9,
    num_train_timesteps=1000,
    shift=1.0,
    shift_terminal=0.02,
    stochastic_sampling=False,
    time_shift_type="exponential",
    use_beta_sigmas=False,
    use_dynamic_shifting=True,
    use_exponential_sigmas=False,
    use_karras_sigmas=False,
)

TRANSFORMER_CONFIG = dict(
    patch_size=2,
    in_channels=64,
    out_channels=16,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=32,
    guidance_embeds=False,
    axes_dims_rope=(4, 6, 6),
)

VAE_CONFIG = dict(
    base_dim=16,
    z_dim=16,
    dim_mult=[1, 2, 2, 2],
    num_res_blocks=1,
    temperal_downsample=[False, True, True],
    latents_mean=[0.0] * 16,
    latents_std=[1.0] * 16,
)


def build_tokenizer():
    """A byte-level BPE trained on the template and caption words, as a ``Qwen2Tokenizer``."""
    from transformers import Qwen2Tokenizer

    # Special tokens are split out by the tokenizer before BPE; train on plain text only.
    corpus = []
    for s in VOCAB_SENTENCES:
        for sp in SPECIAL_TOKENS:
            s = s.replace(sp, "\n")
        corpus.append(s)
    tok = train_byte_level_bpe(corpus, TOKENIZER_VOCAB_SIZE - len(SPECIAL_TOKENS))
    vocab, merges = bpe_vocab_and_merges(tok, SPECIAL_TOKENS)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    prefix = PROMPT_TEMPLATE.split("{}")[0]
    n_prefix = len(tokenizer(prefix)["input_ids"])
    if n_prefix != PROMPT_TEMPLATE_DROP:
        raise RuntimeError(
            f"tiny tokenizer splits the prompt template prefix into {n_prefix} tokens, "
            f"expected {PROMPT_TEMPLATE_DROP} (as the pipeline drops that many)"
        )
    return tokenizer


def build_text_encoder(tokenizer, seed: int):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = tokenizer.convert_tokens_to_ids
    vocab_size = max(TOKENIZER_VOCAB_SIZE, len(tokenizer))
    text_config = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        tie_word_embeddings=False,
    )
    vision_config = dict(
        depth=1,
        hidden_size=16,
        intermediate_size=32,
        num_heads=2,
        out_hidden_size=32,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=112,
        fullatt_block_indexes=[0],
    )
    config = Qwen2_5_VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    return model.eval()


def build_components(seed: int = 0, transformer_config: dict | None = None) -> dict:
    """The five pipeline components, random-init from ``seed`` (float32).

    ``transformer_config`` overrides entries of ``TRANSFORMER_CONFIG`` (the demo model is wider).
    """
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLQwenImage(**VAE_CONFIG).eval()
    torch.manual_seed(seed * 1000 + 3)
    transformer = QwenImageTransformer2DModel(**{**TRANSFORMER_CONFIG, **(transformer_config or {})}).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    return dict(
        transformer=transformer, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, scheduler=scheduler
    )


def save_pipeline(components: dict, out_dir: str | Path) -> Path:
    """Write components in the hub layout with ``QwenImagePipeline.save_pretrained`` (safetensors)."""
    from diffusers import QwenImagePipeline

    # transformers may also write generation_config.json; harmless.
    return save_tiny_pipeline(QwenImagePipeline(**components), out_dir)


def build_tiny_qwen_image(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Qwen-Image pipeline to ``out_dir``; return its path.

    Same ``seed`` gives identical weights; a different seed gives different weights.
    """
    return save_pipeline(build_components(seed), out_dir)


def build_tiny_qwen_image_edit(out_dir: str | Path, seed: int = 0, *, plus: bool = True,
                               zero_cond_t: bool = False) -> Path:
    """Write a random-init tiny Qwen-Image-Edit pipeline to ``out_dir``: the same five
    components (``zero_cond_t`` in the transformer's config for a 2511-like model), a
    ``processor/`` folder (the tokenizer and the released Qwen2-VL image settings) and a
    model_index.json naming ``QwenImageEditPlusPipeline`` (2509/2511) or
    ``QwenImageEditPipeline`` with its processor."""
    from diffusers import QwenImageTransformer2DModel

    components = build_components(seed)
    if zero_cond_t:
        torch.manual_seed(seed * 1000 + 3)
        components["transformer"] = QwenImageTransformer2DModel(
            **TRANSFORMER_CONFIG, zero_cond_t=True).eval()
    out = save_pipeline(components, out_dir)
    processor = load_processor(out / "tokenizer")
    processor.tokenizer.save_pretrained(out / "processor")
    processor.image_processor.save_pretrained(out / "processor")
    index_file = out / "model_index.json"
    index = json.loads(index_file.read_text(encoding="utf-8"))
    index["_class_name"] = "QwenImageEditPlusPipeline" if plus else "QwenImageEditPipeline"
    index["processor"] = ["transformers", "Qwen2VLProcessor"]
    index_file.write_text(json.dumps(index, indent=2), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.qwen_image.tiny", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights (default 0)")
    args = parser.parse_args(argv)
    path = build_tiny_qwen_image(args.out_dir, seed=args.seed)
    print(path)


if __name__ == "__main__":
    main()
