"""Tiny real-architecture FLUX.2 [dev] pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (Flux2Pipeline)
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

- transformer: ``Flux2Transformer2DModel``, 2 double + 2 single blocks, 2 heads x 16, with
  the guidance embedding FLUX.2 [dev] has;
- text encoder: ``Mistral3ForConditionalGeneration``, a Mistral text model of hidden 16 and
  31 layers, so that the pipeline's hidden-state layers (10, 20, 30) exist and 30 is not the
  last (normed) one, as in the real 40-layer model; they stack to 3 x 16 = 48 features (the
  transformer's ``joint_attention_dim``); a one-layer Pixtral vision tower;
- VAE: ``AutoencoderKLFlux2`` with four levels (8 pixels per latent cell, as the real one)
  and 4 latent channels (16 after the 2x2 patchify, the transformer's ``in_channels``);
- tokenizer: a byte-level BPE trained here on the caption words and the pipeline's system
  message, with Mistral's control tokens and a chat template reduced from Mistral Small
  3.1's (system prompt, user turns of text blocks), saved as ``chat_template.jinja``;
- scheduler: ``FlowMatchEulerDiscreteScheduler`` with FLUX.2's settings.

Random weights render noise.

Run:
    python -m backend.families.flux2_dev.tiny OUT_DIR [--seed 0]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from backend.families.common import save_tiny_pipeline, train_byte_level_bpe
from backend.families.flux2_dev.published import SCHEDULER

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
VOCAB_SENTENCES = [
    "a red circle on a white background", "a green square on a white background",
    "a blue triangle on a white background", "a yellow circle on a black background",
    "a small big large tiny shape in the center, zlr style, zerolora, checkerboard pattern",
    "a picture an image of the a and with on in at, left right top bottom middle photo cat",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
VOCAB_SIZE = 512

TEXT_HIDDEN = 16
TEXT_LAYERS = 31           # the pipeline stacks hidden_states[10], [20], [30]
TRANSFORMER_CONFIG = dict(
    patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=3 * TEXT_HIDDEN, timestep_guidance_channels=32,
    mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True,
)
VAE_CONFIG = dict(
    block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4,
    norm_num_groups=4, sample_size=64,
)


def build_tokenizer():
    """A byte-level BPE on the caption words and the system message, with Mistral's control
    tokens and the reduced chat template."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from transformers import PreTrainedTokenizerFast

    tok = train_byte_level_bpe(VOCAB_SENTENCES + [SYSTEM_MESSAGE],
                               VOCAB_SIZE - len(SPECIAL_TOKENS))
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
        vocab_size=len(tokenizer), hidden_size=TEXT_HIDDEN, intermediate_size=32,
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


def build_components(seed: int = 0) -> dict:
    """The pipeline's components, random-init from ``seed`` (float32)."""
    import torch
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


def build_tiny_flux2_dev(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny FLUX.2 [dev] pipeline to ``out_dir``; return its path."""
    from diffusers import Flux2Pipeline

    out = save_tiny_pipeline(Flux2Pipeline(**build_components(seed)), out_dir)
    # The text encoder's folder is recognised by its config's architectures.
    cfg = json.loads((out / "text_encoder" / "config.json").read_text())
    assert "Mistral3ForConditionalGeneration" in cfg.get("architectures", []), cfg
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.flux2_dev.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    print(build_tiny_flux2_dev(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
