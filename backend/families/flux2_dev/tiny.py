"""Tiny real-architecture FLUX.2 [dev] pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (Flux2Pipeline)
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

- transformer, VAE, scheduler: FLUX.2's at the shared tiny sizes (``flux2.tiny_components``),
  the transformer with the guidance embedding FLUX.2 [dev] has;
- text encoder: ``Mistral3ForConditionalGeneration``, a Mistral text model of hidden 16 and
  31 layers, so that the pipeline's hidden-state layers (10, 20, 30) exist and 30 is not the
  last (normed) one, as in the real 40-layer model; they stack to 3 x 16 = 48 features (the
  transformer's ``joint_attention_dim``); a one-layer Pixtral vision tower;
- tokenizer: a byte-level BPE trained here on the caption words and the pipeline's system
  message, with Mistral's control tokens and a chat template reduced from Mistral Small
  3.1's (system prompt, user turns of text blocks), saved as ``chat_template.jinja``.

Random weights render noise.

Run:
    python -m backend.families.flux2_dev.tiny OUT_DIR [--seed 0]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from backend.families import flux2
from backend.families.common import train_byte_level_bpe

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]",
                  "[/SYSTEM_PROMPT]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
# Mistral Small 3.1's chat template, reduced to what the pipeline uses: a system message
# and user turns whose content is a string or a list of text (and image) blocks.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}"
    "{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}{%- else %}{{- '[IMG]' }}{%- endif %}"
    "{%- endfor %}{{- '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}"
    "{%- endif %}{%- endfor %}"
)

TEXT_LAYERS = 31           # the pipeline stacks hidden_states[10], [20], [30]


def build_tokenizer():
    """A byte-level BPE on the caption words and the system message, with Mistral's control
    tokens and the reduced chat template."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from transformers import PreTrainedTokenizerFast

    tok = train_byte_level_bpe(flux2.TINY_VOCAB_SENTENCES + [SYSTEM_MESSAGE],
                               flux2.TINY_VOCAB_SIZE - len(SPECIAL_TOKENS))
    tok.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>", model_max_length=131072,
                                        clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_text_encoder(tokenizer, seed: int):
    import torch
    from transformers import (Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig,
                              PixtralVisionConfig)

    ids = tokenizer.convert_tokens_to_ids
    text = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=flux2.TINY_TEXT_HIDDEN, intermediate_size=32,
        num_hidden_layers=TEXT_LAYERS, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, max_position_embeddings=1024, tie_word_embeddings=False,
        bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>"))
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, image_size=64, patch_size=16)
    config = Mistral3Config(text_config=text, vision_config=vision,
                            image_token_index=ids("[IMG]"), spatial_merge_size=2,
                            tie_word_embeddings=False)
    torch.manual_seed(seed)
    return Mistral3ForConditionalGeneration(config).eval()


def build_tiny_flux2_dev(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny FLUX.2 [dev] pipeline to ``out_dir`` (float32, from
    ``seed``); return its path."""
    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    components = flux2.tiny_components(tokenizer, text_encoder, seed, guidance_embeds=True)
    return flux2.save_tiny("Flux2Pipeline", components, out_dir,
                           "Mistral3ForConditionalGeneration")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.flux2_dev.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    print(build_tiny_flux2_dev(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
