"""Tiny real-architecture FLUX.2 [klein] pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (Flux2KleinPipeline)
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

- transformer: ``Flux2Transformer2DModel``, 2 double + 2 single blocks, 2 heads x 16;
- text encoder: ``Qwen3ForCausalLM``, hidden 16 and 28 layers, so that the pipeline's
  default hidden-state layers (9, 18, 27) exist and stack to 3 x 16 = 48 features (the
  transformer's ``joint_attention_dim``);
- VAE: ``AutoencoderKLFlux2`` with four levels (8 pixels per latent cell, as the real one)
  and 4 latent channels (16 after the 2x2 patchify, the transformer's ``in_channels``);
- tokenizer: a byte-level BPE trained here, as ``Qwen2TokenizerFast`` with Qwen3's chat
  template (``enable_thinking=False`` adds the empty think block, as the real one does);
- scheduler: ``FlowMatchEulerDiscreteScheduler`` with FLUX.2's settings.

Random weights render noise.

Run:
    python -m backend.families.flux2_klein.tiny OUT_DIR [--seed 0]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from backend.families.common import save_tiny_pipeline, train_byte_level_bpe
from backend.families.flux2_klein.published import SCHEDULER

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen3's chat template, reduced to what the pipeline uses: user turns, the generation
# prompt and the empty think block that enable_thinking=False adds.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
VOCAB_SENTENCES = [
    "user assistant system",
    "a red circle on a white background", "a green square on a white background",
    "a blue triangle on a white background", "a yellow circle on a black background",
    "a small big large tiny shape in the center, zlr style, zerolora, checkerboard pattern",
    "a picture an image of the a and with on in at, left right top bottom middle photo cat",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
VOCAB_SIZE = 512

TEXT_HIDDEN = 16
TEXT_LAYERS = 28           # the pipeline stacks hidden_states[9], [18], [27]
TRANSFORMER_CONFIG = dict(
    patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=3 * TEXT_HIDDEN, timestep_guidance_channels=32,
    mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False,
)
VAE_CONFIG = dict(
    block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4,
    norm_num_groups=4, sample_size=64,
)


def build_tokenizer():
    """A byte-level BPE on the caption words, as a ``Qwen2TokenizerFast`` with a chat template."""
    from transformers import Qwen2TokenizerFast

    tok = train_byte_level_bpe(VOCAB_SENTENCES, VOCAB_SIZE - len(SPECIAL_TOKENS))
    tok.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = Qwen2TokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None,
                                   model_max_length=512, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_text_encoder(tokenizer, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=TEXT_HIDDEN, intermediate_size=32,
        num_hidden_layers=TEXT_LAYERS, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, max_position_embeddings=1024, tie_word_embeddings=True,
        bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"))
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).eval()


def build_components(seed: int = 0) -> dict:
    """The pipeline's components, random-init from ``seed`` (float32)."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Transformer2DModel

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLFlux2(**VAE_CONFIG).eval()
    torch.manual_seed(seed * 1000 + 3)
    transformer = Flux2Transformer2DModel(**TRANSFORMER_CONFIG).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, scheduler=scheduler)


def build_tiny_flux2_klein(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny FLUX.2 [klein] pipeline to ``out_dir``; return its path."""
    from diffusers import Flux2KleinPipeline

    out = save_tiny_pipeline(Flux2KleinPipeline(**build_components(seed)), out_dir)
    # The text encoder's folder is recognised by its config's architectures.
    cfg = json.loads((out / "text_encoder" / "config.json").read_text())
    assert "Qwen3ForCausalLM" in cfg.get("architectures", []), cfg.get("architectures")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.flux2_klein.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    print(build_tiny_flux2_klein(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
