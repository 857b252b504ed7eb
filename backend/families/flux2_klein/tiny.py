"""Tiny real-architecture FLUX.2 [klein] pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (Flux2KleinPipeline)
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

- transformer, VAE, scheduler: FLUX.2's at the shared tiny sizes (``flux2.tiny_components``),
  the transformer without a guidance embedding, as the klein models;
- text encoder: ``Qwen3ForCausalLM``, hidden 16 and 28 layers, so that the pipeline's
  default hidden-state layers (9, 18, 27) exist and stack to 3 x 16 = 48 features (the
  transformer's ``joint_attention_dim``);
- tokenizer: a byte-level BPE trained here, as ``Qwen2TokenizerFast`` with Qwen3's chat
  template (``enable_thinking=False`` adds the empty think block, as the real one does).

Random weights render noise.

Run:
    python -m backend.families.flux2_klein.tiny OUT_DIR [--seed 0]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from backend.families import flux2
from backend.families.common import train_byte_level_bpe

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
# The chat roles, then the caption words.
VOCAB_SENTENCES = ["user assistant system", *flux2.TINY_VOCAB_SENTENCES]

TEXT_LAYERS = 28           # the pipeline stacks hidden_states[9], [18], [27]


def build_tokenizer():
    """A byte-level BPE on the caption words, as a ``Qwen2TokenizerFast`` with a chat template."""
    from transformers import Qwen2TokenizerFast

    tok = train_byte_level_bpe(VOCAB_SENTENCES, flux2.TINY_VOCAB_SIZE - len(SPECIAL_TOKENS))
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
        vocab_size=len(tokenizer), hidden_size=flux2.TINY_TEXT_HIDDEN, intermediate_size=32,
        num_hidden_layers=TEXT_LAYERS, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, max_position_embeddings=1024, tie_word_embeddings=True,
        bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"))
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).eval()


def build_tiny_flux2_klein(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny FLUX.2 [klein] pipeline to ``out_dir`` (float32, from
    ``seed``); return its path."""
    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    components = flux2.tiny_components(tokenizer, text_encoder, seed, guidance_embeds=False)
    return flux2.save_tiny("Flux2KleinPipeline", components, out_dir, "Qwen3ForCausalLM")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.flux2_klein.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    print(build_tiny_flux2_klein(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
