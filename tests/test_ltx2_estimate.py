"""The estimator's LTX-2 figures count what the transformer attends over, and LTX-2.3's are
its own model's.

- a clip's tokens are its video tokens plus the audio stream's: every LTX-2 run feeds the
  stream the clip's audio length (noise without sound, the cached sound with
  ``input_audio``), so a run with sound counts the same tokens as one without, and the
  audio tokens are exactly the length stage 1 caches for a clip of that many frames (the
  family's own ``t2av.sound_latents`` through the tiny audio VAE, on the clip's silence);
- IC-LoRA appends the reference video's tokens (the clip's own count at downsample factor
  1); image-to-video's first frame replaces a latent frame and adds none; the train stage's
  per-block inputs grow by exactly those tokens;
- the LTX-2.3 sources estimate with LTX-2.3's published configs (gated attention and
  cross-attention modulation: more transformer parameters than LTX-2's; its own video VAE).

No model files: the configs are the published ones (the estimate says so), the audio VAE is
the tiny real-architecture one the family builds (``tiny.build_sound_components``).
"""
from __future__ import annotations

import pytest

from backend.config.validation import validate
from backend.families.ltx2 import REPO, REPO_2_3, sources
from backend.planning.estimator import estimate_memory

HEIGHT, WIDTH = 512, 768


def run(frames: int, inputs: str = "", repo: str = REPO):
    """A validated LTX-2 run of ``frames``-frame 512x768 clips with ``extra_inputs``
    ``inputs``: torch checkpointing, no DeepSpeed (per-block inputs on the GPU)."""
    return validate({"model_family": "ltx2", "model_id_with_origin_paths": sources(repo),
                     "extra_inputs": inputs, "num_frames": frames, "height": HEIGHT,
                     "width": WIDTH, "use_gradient_checkpointing": True, "zero_stage": 0},
                    require_inputs=False)


def video_cells(frames: int) -> int:
    """Latent frames x latent area of a clip (32x in space, 8x in time, patch 1)."""
    return ((frames - 1) // 8 + 1) * (HEIGHT // 32) * (WIDTH // 32)


@pytest.fixture(scope="module")
def audio_vae():
    from backend.families.ltx2.tiny import build_sound_components

    return build_sound_components(0)[0]


def cached_audio_tokens(audio_vae, frames: int) -> int:
    """The audio tokens stage 1 caches for a clip of ``frames`` frames: its sound (silence,
    read for the clip's duration at the family's frame rate) through the family's mel front
    end, audio VAE, packing and cut (``t2av.sound_latents``, as ``SoundEncoder`` calls it)."""
    from backend.families.ltx2.adapter import FRAME_RATE
    from backend.families.ltx2.audio import MelSettings, silence
    from backend.families.ltx2.t2av import sound_latents

    mel = MelSettings.from_configs(audio_vae.config)
    latent_frames = (frames - 1) // 8 + 1
    latents = sound_latents(audio_vae, mel, silence(mel, frames / FRAME_RATE), latent_frames)
    assert latents.ndim == 3 and latents.shape[0] == 1
    return int(latents.shape[1])


@pytest.mark.parametrize("frames", [121, 49])
def test_a_clip_counts_the_audio_tokens_stage_one_caches(audio_vae, frames):
    """With sound or without, a clip is its video cells plus the audio latent frames stage 1
    caches for it (126 for 121 frames at 24 fps: 25 a second)."""
    audio = cached_audio_tokens(audio_vae, frames)
    assert audio == {121: 126, 49: 51}[frames]
    silent = estimate_memory(run(frames))
    sound = estimate_memory(run(frames, "input_audio"))
    assert silent.sources["transformer"] == "published"
    assert sound.image_tokens == silent.image_tokens == video_cells(frames) + audio


def per_block_inputs(estimate) -> float:
    return estimate.stages["train"].gpu["checkpointed inputs"]


def test_ic_lora_counts_the_reference_video_and_i2av_adds_no_tokens(audio_vae):
    """IC-LoRA: the clip's tokens twice (the reference at the clip's frames and size) plus
    the audio; image-to-video: the sound run's tokens. The train stage's per-block inputs
    are linear in the tokens: the reference adds its tokens' share, and the sound run's are
    video + audio + text tokens at that rate."""
    frames = 121
    audio = cached_audio_tokens(audio_vae, frames)
    sound = estimate_memory(run(frames, "input_audio"))
    i2av = estimate_memory(run(frames, "input_audio,input_image"))
    ic = estimate_memory(run(frames, "input_audio,in_context_videos"))
    video = video_cells(frames)
    assert i2av.image_tokens == sound.image_tokens == video + audio
    assert ic.image_tokens == 2 * video + audio
    per_token = (per_block_inputs(ic) - per_block_inputs(sound)) / video
    assert per_token > 0
    assert per_block_inputs(sound) == pytest.approx(
        per_token * (video + audio + sound.text_tokens), rel=1e-9)
    assert ic.stages["train"].gpu["activations"] > sound.stages["train"].gpu["activations"]


def test_ltx2_3_estimates_with_its_own_published_configs():
    """The LTX-2.3 sources estimate with LTX-2.3's transformer (gated attention and
    cross-attention modulation in both streams: more parameters than LTX-2's, same blocks
    and width) and its own video VAE; the base weights the train stage holds follow."""
    from backend.families.ltx2.published import TRANSFORMER_2_3
    from backend.planning.estimator import model_configs

    cfg_2, cfg_2_3 = run(121, "input_audio"), run(121, "input_audio", REPO_2_3)
    configs = model_configs(cfg_2_3)[0]
    assert configs["transformer"] == TRANSFORMER_2_3 and configs["transformer"]["gated_attn"]
    assert model_configs(cfg_2)[0]["transformer"].get("gated_attn", False) is False
    ltx2, ltx2_3 = estimate_memory(cfg_2), estimate_memory(cfg_2_3)
    assert ltx2_3.sources["transformer"] == "published"
    assert ltx2_3.params["transformer"] > ltx2.params["transformer"]
    assert ltx2_3.params["vae"] != ltx2.params["vae"]
    base_2, base_2_3 = (e.stages["train"].gpu["base weights"] for e in (ltx2, ltx2_3))
    assert base_2_3 == pytest.approx(base_2 * ltx2_3.params["transformer"]
                                     / ltx2.params["transformer"])
    assert ltx2_3.image_tokens == ltx2.image_tokens
