"""LTX-2 text-to-video, video only (the reference's no-audio variant) and with its sound
(text-to-video-and-audio, ``extra_inputs: input_audio``), end to end on the tiny
real-architecture model built by the family's code.

- recognised from its model id and from a local pipeline's ``_class_name``; clips take 8k+1
  frames (the family's ``frame_multiple``), a count it cannot take names the field;
- stage 1 caches what ``LTX2Pipeline`` computes: its prompt encoding through the connectors
  (both streams' embeddings and the mask) and the video VAE's normalised latents of the
  clip as decoded with PyAV;
- stage 2 under DeepSpeed ZeRO-3 with parameter and optimizer offload: finite losses, a
  LoRA on every attention layer of both streams that changes the transformer's output;
- the diffusers export renders a clip through ``LTX2Pipeline`` (WebM and frame strip);
  the ComfyUI names are the original checkpoint's, which diffusers' own LTX-2 converter
  reads back to every module.

With sound:

- the mel front end puts a tone in its mel band, agrees with the audio VAE and vocoder
  configs, and its latents are what ``LTX2Pipeline`` decodes (a round trip through the
  audio VAE and the vocoder of the tiny model);
- sound is read with PyAV from the clip or a separate file, resampled and cut to the clip;
- a clip without sound is refused before any stage, naming the row (or trains on silence
  with ``audio_missing: silence``); another sample rate is resampled, with a note;
- stage 1 caches the audio latents, stage 2 trains the audio branch (a LoRA the video-only
  loss leaves at zero), and a sample is an MP4 with an audio stream PyAV reads back.

Conditioned (``condition.py``):

- the reference's LTX-2.3-I2AV and LTX-2-T2AV-IC-LoRA scripts import with their
  repackaged files named as the diffusers repositories' components;
- an IC-LoRA row without its reference video (or with a missing file, or a downsample
  factor that does not fit) is refused before any stage, naming the row;
- image-to-video with sound: the first latent frame is the clip's first frame encoded
  alone, clean at timestep 0 and out of the loss; a sample renders through
  ``LTX2ImageToVideoPipeline``;
- IC-LoRA: the reference's latents are clean tokens after the clip's, at timestep 0 and
  out of the loss; a clip renders through ``LTX2InContextPipeline``.

The video-only model, the clips, the cache and the trained LoRA are the session's
(``family_runs``, tests/harness/families.py), shared with the common checks of
tests/test_every_family.py; the run with sound is this module's (``t2av_run``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.families import family_spec, get_family, recognise
from tests.harness.families import family_cases

REPO_ID = "Lightricks/LTX-2"


def ltx2_case():
    return next(c for c in family_cases() if c.family == "ltx2")


PROMPT = "a red ball rolls from left to right, zlr style"


def pipeline(models):
    from diffusers import LTX2Pipeline

    pipe = LTX2Pipeline.from_pretrained(str(models / REPO_ID))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_recognised_by_id_and_class_and_clips_take_8k_plus_1_frames(tmp_path):
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    assert recognise(f"{REPO_ID}:transformer/*.safetensors") == ("ltx2", None)
    folder = get_family("ltx2").build_tiny(tmp_path / "tiny")
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == \
        "LTX2Pipeline"
    assert recognise(str(folder)) == ("ltx2", None)
    assert recognise(str(folder / "transformer")) == ("ltx2", None)
    assert family_spec("ltx2").frame_multiple == 8

    base = {"model_family": "ltx2", "model_id_with_origin_paths": str(folder)}
    assert validate({**base, "num_frames": 9, "frame_buckets": [17, 121]},
                    require_inputs=False).num_frames == 9
    with pytest.raises(ConfigError) as refused:  # 4k+1, not 8k+1
        validate({**base, "num_frames": 5}, require_inputs=False)
    assert "num_frames: must be 8k+1 (got 5; allowed e.g. 1 or 9)" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        validate({**base, "frame_buckets": [17, 21]}, require_inputs=False)
    assert "frame_buckets: must be 8k+1 (got 21; allowed e.g. 17 or 25)" in str(refused.value)
    # The other video family keeps its 4k+1.
    assert validate({"model_family": "wan", "num_frames": 5},
                    require_inputs=False).num_frames == 5


def test_every_data_process_offload_mode_encodes_the_same(tmp_path):
    """Stage 1's encoder with its weights on the device, moved there per pass (``model``:
    the connectors go with the text encoder) or streamed module by module (``sequential``)
    gives the same tensors."""
    import torch

    family = get_family("ltx2")
    folder = family.build_tiny(tmp_path / "tiny")
    dirs = {c: folder / c for c in family_spec("ltx2").stage_components("data_process")}
    clip = torch.rand((1, 3, 9, 32, 64), generator=torch.Generator().manual_seed(0)) * 2 - 1
    items = [(lambda: clip, PROMPT), (lambda: clip[:, :, :1], "a still yellow square")]
    encoded = {mode: list(family.load_encoder(dirs, torch.float32, "cpu", offload=mode)
                          .encode_samples(items, log=lambda _: None))
               for mode in ("none", "model", "sequential")}
    first = encoded["none"]
    assert [tuple(s["latents"].shape) for s in first] == [(1, 8, 2, 1, 2), (1, 8, 1, 1, 2)]
    for mode in ("model", "sequential"):
        for a, b in zip(first, encoded[mode]):
            assert a.keys() == b.keys()
            assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a), mode


def test_comfyui_names_are_the_originals_and_diffusers_reads_them_back():
    """Every Linear of the published transformer has a ComfyUI name (the original
    checkpoint's: ``patchify_proj``, ``adaln_single``...) that diffusers' own LTX-2 LoRA
    converter maps back to the module."""
    from diffusers.loaders.lora_conversion_utils import \
        _convert_non_diffusers_ltx2_lora_to_diffusers

    family = get_family("ltx2")
    modules = family.lora_module_map()
    native = {f"diffusion_model.{family.export_module_name(m, 'comfyui')}.lora_A.weight": m
              for m in modules}
    assert "diffusion_model.patchify_proj.lora_A.weight" in native
    assert "diffusion_model.adaln_single.linear.lora_A.weight" in native
    assert "diffusion_model.transformer_blocks.0.audio_to_video_attn.to_q.lora_A.weight" in native
    back = _convert_non_diffusers_ltx2_lora_to_diffusers(dict.fromkeys(native, 0))
    assert sorted(back) == sorted(f"transformer.{m}.lora_A.weight" for m in modules)
    assert all(family.import_module_name(family.export_module_name(m, "comfyui"), "comfyui")
               == m for m in modules)


def test_clip_tokens_and_the_training_schedule():
    """A 512x768 clip of 121 frames is 16 x 24 x 16 latent cells; the schedule runs from
    sigma 1 to 0.1 with weights of mean 1."""
    family = get_family("ltx2")
    assert family.video_tokens(512, 768, 121) == 6144 + 126  # and the sound it attends over
    schedule = family.training_schedule()
    assert float(schedule.sigmas[0]) == pytest.approx(1.0)
    assert float(schedule.sigmas[-1]) == pytest.approx(0.1)
    assert bool((schedule.sigmas[1:] < schedule.sigmas[:-1]).all())
    assert float(schedule.weights.mean()) == pytest.approx(1.0, rel=1e-4)


@pytest.mark.slow
def test_stage1_caches_what_the_pipeline_computes(family_runs):
    import torch
    from diffusers import LTX2Pipeline

    from backend.config.validation import validate
    from backend.data.cache import load_cached_samples, read_manifest
    from backend.data.video import load_clip

    cache = family_runs.cache(ltx2_case())
    models, data = family_runs.models(ltx2_case()), family_runs.dataset(ltx2_case())
    manifest = read_manifest(cache)
    assert manifest["family"] == "ltx2"
    samples = load_cached_samples(cache)
    rows = [e["prompt"] for e in manifest["samples"]]
    pipe = pipeline(models)
    for sample, prompt in zip(samples, rows):
        emb, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False,
                                             device="cpu")
        video, audio, mask = pipe.connectors(emb, mask, padding_side="left")
        assert sample["prompt_emb"].shape == (1, 1024, 16)
        assert torch.allclose(sample["prompt_emb"], video, atol=1e-5)
        assert torch.allclose(sample["audio_prompt_emb"], audio, atol=1e-5)
        assert torch.equal(sample["prompt_emb_mask"].bool(), mask.bool())

    raw = family_runs.config(ltx2_case(), data / "unused")
    cfg = validate({**raw, "dataset_base_path": str(data)}, require_inputs=False)
    index = next(i for i, e in enumerate(manifest["samples"]) if e["prompt"] == PROMPT)
    pixels = load_clip(data / "red.webm", cfg)
    frames = cfg.num_frames
    assert tuple(pixels.shape) == (1, 3, frames, 32, 32)
    z = pipe.vae.encode(pixels).latent_dist.mode()
    z = LTX2Pipeline._normalize_latents(z, pipe.vae.latents_mean, pipe.vae.latents_std)
    assert samples[index]["latents"].shape == (1, 8, (frames - 1) // 8 + 1, 1, 1)
    assert torch.allclose(samples[index]["latents"], z, atol=1e-5)


@pytest.mark.slow
def test_zero3_offload_trains_a_lora_that_changes_the_transformer(family_runs):
    import math

    import torch

    from backend.config.validation import validate
    from backend.core.progress import read_events
    from backend.data.cache import load_cached_samples
    from backend.models.lora import load_lora, read_lora
    from backend.training.samples import component_dirs

    path, raw, out = family_runs.trained(ltx2_case())
    assert "ZeRO-3" in out
    events, _ = read_events(f"{raw['output_path']}/progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert losses and all(math.isfinite(x) for x in losses)

    tensors, meta = read_lora(path)
    modules = {k.split(".lora_", 1)[0] for k in tensors}
    for stream in ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn",
                   "video_to_audio_attn"):
        assert f"transformer_blocks.1.{stream}.to_out.0" in modules, stream

    cfg = validate(raw)
    family = get_family("ltx2")
    folder = component_dirs(cfg, ["transformer"])["transformer"]
    model = family.load_transformer(folder, torch.float32).eval()
    sample = load_cached_samples(family_runs.cache(ltx2_case()))[0]
    schedule = family.training_schedule()
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = family.loss_at(model, sample, schedule, 500, noise, torch.float32)
        load_lora(model, path)
        after = family.loss_at(model, sample, schedule, 500, noise, torch.float32)
    assert math.isfinite(float(after)) and abs(float(after) - float(before)) > 1e-6


@pytest.mark.slow
def test_the_diffusers_export_renders_a_clip_through_the_pipeline(family_runs, tmp_path):
    import numpy as np
    import torch

    from backend.config.validation import validate
    from backend.data.video import read_video_frames
    from backend.models.export import export_lora

    path, raw, _ = family_runs.trained(ltx2_case())
    cfg = validate(raw)
    models = family_runs.models(ltx2_case())
    exported = export_lora(path, "diffusers", out_dir=tmp_path, family="ltx2",
                           transformer_config=models / REPO_ID / "transformer")
    family = get_family("ltx2")
    pipe = pipeline(models)

    def clip():
        return family.render(pipe, PROMPT, negative_prompt="", steps=2, cfg=3.0, height=32,
                             width=64, num_frames=9,
                             generator=torch.Generator().manual_seed(0))

    base = clip()
    pipe.load_lora_weights(str(exported))
    with_lora = clip()
    assert base.shape == with_lora.shape == (9, 32, 64, 3)
    assert np.isfinite(with_lora).all() and np.abs(with_lora - base).max() > 1e-3

    written = family.save_sample(with_lora, tmp_path / "p00-seed0.webm", cfg)
    assert [p.name for p in written] == ["p00-seed0.webm", "p00-seed0.strip.png"]
    frames = read_video_frames(written[0])
    assert len(frames) == 9 and frames[0].shape == (32, 64, 3)


# ------------------------------------------------------------------------------------------
# Text-to-video-and-audio (extra_inputs: input_audio)
# ------------------------------------------------------------------------------------------
RELEASED_AUDIO_VAE = {"sample_rate": 16000, "mel_hop_length": 160, "mel_bins": 64,
                      "in_channels": 2}  # the released audio VAE's config (diffusers layout)


def sound_config(data, **changes):
    """A validated LTX-2 run with sound on the dataset folder ``data``."""
    from backend.config.validation import validate

    raw = {"model_family": "ltx2", "task": "sft:data_process", "extra_inputs": "input_audio",
           "data_file_keys": "video,input_audio", "num_frames": 9, "height": 32, "width": 32,
           "dataset_base_path": str(data), "dataset_metadata_path": str(data / "metadata.csv")}
    return validate({**raw, **changes}, require_inputs=False)


def test_the_mel_front_end_puts_a_tone_in_its_band_and_fits_the_vocoder():
    """A 440 Hz, 2 kHz and 6 kHz tone each peak in the mel band centred nearest them, at the
    released settings (64 Slaney bands to 8 kHz, a hop of 160 at 16 kHz: N // 160 + 1
    frames); every band of the filterbank has unit area; the released and tiny vocoders
    write one hop of sound per mel frame, and one that does not is refused."""
    import math

    import torch

    from backend.families.ltx2 import tiny
    from backend.families.ltx2.audio import (MelSettings, mel_band_of, mel_filterbank,
                                             mel_spectrogram)
    from backend.families.ltx2.published import VOCODER

    s = MelSettings.from_configs(RELEASED_AUDIO_VAE, VOCODER)
    assert (s.sample_rate, s.hop_length, s.mel_bins, s.channels, s.n_fft) == \
        (16000, 160, 64, 2, 1024)
    t = torch.arange(8000) / 16000
    peaks = {}
    for freq in (440.0, 2000.0, 6000.0):
        wave = (0.5 * torch.sin(2 * math.pi * freq * t)).repeat(2, 1)
        mel = mel_spectrogram(wave, s)
        assert mel.shape == (1, 2, 8000 // 160 + 1, 64)
        peaks[freq] = int(mel[0, :, 5:-5].mean(dim=(0, 1)).argmax())
        assert peaks[freq] == mel_band_of(freq, s), freq
    assert peaks[440.0] < peaks[2000.0] < peaks[6000.0]
    fb = mel_filterbank(s)
    wide = (fb > 0).sum(dim=1) > 8  # bands wider than 8 FFT bins: their sum is their area
    areas = fb.sum(dim=1) * (s.sample_rate / s.n_fft)
    assert bool(wide.any()) and torch.allclose(areas[wide], torch.ones(int(wide.sum())),
                                               atol=0.05)
    assert float(torch.log(torch.tensor(1e-5))) == pytest.approx(
        float(mel_spectrogram(torch.zeros(2, 1600), s).max()))  # silence: the log floor

    MelSettings.from_configs(tiny.AUDIO_VAE_CONFIG,
                             dict(tiny.VOCODER_CONFIG, in_channels=2 * 8))
    with pytest.raises(ValueError, match="not one hop"):
        MelSettings.from_configs(RELEASED_AUDIO_VAE, dict(VOCODER, upsample_factors=[6, 5, 2]))


def test_audio_latents_round_trip_through_the_pipelines_decoder():
    """On the tiny model: a tone's mel -> the audio VAE -> the cached latents have the shape
    ``LTX2Pipeline`` gives a clip of 9 frames (its audio length, the transformer's audio
    channels) and undo to the VAE's own posterior mode by the pipeline's denormalise and
    unpack; decoded and vocoded as the pipeline does, the sound comes back at the VAE's
    rate, one hop per decoded mel frame, and the front end reads it back to as many frames
    (centred: one more) of the same bands."""
    import torch
    from diffusers import LTX2Pipeline, LTX2VideoTransformer3DModel

    from backend.families.ltx2 import tiny
    from backend.families.ltx2.adapter import audio_frames
    from backend.families.ltx2.audio import MelSettings, mel_spectrogram
    from backend.families.ltx2.t2av import sound_latents
    from tests.harness.audio import tone

    vae, vocoder = tiny.build_sound_components(0)
    transformer = LTX2VideoTransformer3DModel.from_config(tiny.TRANSFORMER_CONFIG)
    s = MelSettings.from_configs(vae.config, vocoder.config)
    wave = torch.from_numpy(tone(440.0, s.sample_rate, 9 / 24))
    latents = sound_latents(vae, s, wave, latent_frames=2)
    length = audio_frames(transformer.config, 2)
    assert length == round(9 / 24 * 16000 / 160 / 4) == 9
    assert tuple(latents.shape) == (1, length, transformer.config.audio_in_channels)

    with torch.no_grad():
        mode = vae.encode(mel_spectrogram(wave, s)).latent_dist.mode()
        assert mode.shape[2] >= length
        back = LTX2Pipeline._unpack_audio_latents(
            LTX2Pipeline._denormalize_audio_latents(latents, vae.latents_mean,
                                                    vae.latents_std),
            length, num_mel_bins=s.mel_bins // vae.mel_compression_ratio)
        assert torch.allclose(back, mode[:, :, :length], atol=1e-5)
        assert not torch.allclose(latents, LTX2Pipeline._pack_audio_latents(back))  # normalised
        mel = vae.decode(back).sample
        sound = vocoder(mel)
    assert mel.shape == (1, 2, 4 * length - 3, s.mel_bins)
    assert vocoder.config.output_sampling_rate == s.sample_rate
    assert abs(sound.shape[-1] - mel.shape[2] * s.hop_length) < s.hop_length
    again = mel_spectrogram(sound[0], s)
    assert again.shape[1] == 2 and again.shape[3] == s.mel_bins
    assert again.shape[2] in (mel.shape[2], mel.shape[2] + 1)


def test_sound_is_read_with_pyav_resampled_and_cut_to_the_clip(tmp_path):
    """A 44.1 kHz stereo tone in an MP4 comes back at 16 kHz, as long as asked (the clip's
    duration), its peak still at 440 Hz, in the layout the VAE takes (stereo or mono); a
    mono WAV is read as stereo; sound shorter than the clip is padded with silence."""
    import numpy as np

    from backend.families.ltx2.audio import MelSettings, probe_sound, read_sound
    from tests.harness.audio import sine_clip, sine_wav

    clip = sine_clip(tmp_path / "beep.mp4", freq=440.0, rate=44100, seconds=1.0)
    stereo, mono = MelSettings(16000, 160, 64, 2), MelSettings(16000, 160, 64, 1)
    with open(clip, "rb") as f:
        assert probe_sound(f) == 44100
    with open(clip, "rb") as f:
        wave, rate = read_sound(f, stereo, 0.5)
    assert rate == 44100 and tuple(wave.shape) == (2, 8000)
    spectrum = np.abs(np.fft.rfft(wave[0, 2000:].numpy()))
    assert abs(np.fft.rfftfreq(6000, 1 / 16000)[int(spectrum.argmax())] - 440) < 5
    assert 0.3 < float(wave.abs().max()) < 0.7
    with open(clip, "rb") as f:
        assert tuple(read_sound(f, mono, 0.5)[0].shape) == (1, 8000)

    wav = sine_wav(tmp_path / "voice.wav", freq=660.0, rate=16000, channels=1, seconds=0.25)
    with open(wav, "rb") as f:
        wave, rate = read_sound(f, stereo, 0.5)
    assert rate == 16000 and tuple(wave.shape) == (2, 8000)
    assert bool((wave[0] == wave[1]).all())
    assert float(wave[:, :3900].abs().max()) > 0.3 and float(wave[:, 4100:].abs().max()) == 0


def test_a_sound_run_refuses_a_clip_without_sound_naming_the_row(tmp_path):
    """With ``extra_inputs: input_audio`` every row needs sound (its ``input_audio`` file or
    the clip's own audio stream): a silent clip and a missing file are refused before any
    model loads, each naming its row; ``audio_missing: silence`` trains the silent clip on
    silence instead, said in the log, and a 44.1 kHz clip is resampled, said too. One-shot
    ``sft`` (which encodes no sound) is refused; a run without sound checks nothing of it;
    a family that makes no sound refuses the column."""
    from backend.data.dataset import DatasetError
    from backend.data.video import check_stage_dataset
    from backend.families.ltx2.t2av import SoundAdapter
    from tests.harness.audio import make_sound_dataset, silent_clip

    data = make_sound_dataset(tmp_path / "data")
    silent_clip(data / "mute.mp4")
    rows = (data / "metadata.csv").read_text(encoding="utf-8")
    (data / "metadata.csv").write_text(rows + 'mute.mp4,"a mute clip, zlr style",\n'
                                       'quiet.mp4,"a clip, zlr style",nope.wav\n',
                                       encoding="utf-8")
    cfg = sound_config(data)
    family = get_family("ltx2").for_config(cfg)
    assert isinstance(family, SoundAdapter)
    assert "audio_vae" in family.spec.stage_components("data_process")
    assert "audio_vae" not in get_family("ltx2").spec.stage_components("data_process")
    with pytest.raises(DatasetError) as refused:
        check_stage_dataset(cfg, family)
    problems = [str(p) for p in refused.value.problems]
    assert problems == ["metadata.csv row 3: mute.mp4 has no audio stream (got none; allowed "
                        "a clip with sound, an input_audio file, or audio_missing silence)",
                        "metadata.csv row 4: input_audio: nope.wav not found"]

    (data / "metadata.csv").write_text(rows + 'mute.mp4,"a mute clip, zlr style",\n',
                                       encoding="utf-8")
    said: list[str] = []
    records = check_stage_dataset(sound_config(data, audio_missing="silence"), family,
                                  said.append)
    assert [r.sound.name if r.sound else None for r in records] == \
        ["beep.mp4", "quiet.wav", None]
    assert ("[data] note: metadata.csv row 1: the sound of beep.mp4 is 44100 Hz; resampled "
            "to the model's 16000 Hz") in said
    assert ("[data] note: metadata.csv row 3: mute.mp4 has no audio stream; it trains on "
            "silence (audio_missing silence)") in said

    with pytest.raises(DatasetError, match="task: one-shot training reads no sound"):
        check_stage_dataset(sound_config(data, task="sft"), family)
    with pytest.raises(DatasetError, match="task: one-shot training reads no sound"):
        check_stage_dataset(sound_config(data, task="sft", split_training=False,
                                        stages=["train"]), family,
                            headers_only=True)
    split_plan = sound_config(data, task="sft", audio_missing="silence")
    assert len(check_stage_dataset(split_plan, family, headers_only=True)) == 3

    plain = sound_config(data, extra_inputs="", data_file_keys="video")
    assert [r.sound for r in check_stage_dataset(plain, get_family("ltx2").for_config(plain))] \
        == [None, None, None]
    wan = sound_config(data, model_family="wan", video_fps=24.0)
    with pytest.raises(DatasetError, match="extra_inputs: .* makes no sound"):
        check_stage_dataset(wan, get_family("wan").for_config(wan))


@pytest.fixture(scope="module")
def t2av_run(tmp_path_factory):
    """The tiny LTX-2 under its model id, two clips with sound (a 44.1 kHz tone of the clip,
    a WAV beside a silent clip), stage 1 and two steps of stage 2 with a sample at the end,
    both in this process: (config of stage 2, cache folder, the LoRA, stage 2's output)."""
    from backend.core.rundir import list_checkpoints
    from tests.harness.audio import make_sound_dataset
    from tests.harness.families import run_stage_here, write_run_config

    root = tmp_path_factory.mktemp("t2av")
    get_family("ltx2").build_tiny(root / "models" / REPO_ID)
    data = make_sound_dataset(root / "data")
    base = {"model_family": "ltx2", "models_dir": str(root / "models"), "offline": True,
            "extra_inputs": "input_audio", "data_file_keys": "video,input_audio",
            "num_frames": 9, "height": 32, "width": 32, "mixed_precision": "no",
            "lora_rank": 4, "seed": 0, "dataset_num_workers": 0}
    stage1 = dict(base, task="sft:data_process", dataset_base_path=str(data),
                  dataset_metadata_path=str(data / "metadata.csv"),
                  output_path=str(root / "cache"))
    code, log = run_stage_here("train", ["--config", write_run_config(root / "s1.yaml",
                                                                      stage1)])
    assert code == 0, log[-4000:]
    assert "resampled to the model's 16000 Hz" in log
    stage2 = dict(base, task="sft:train", dataset_base_path=str(root / "cache"),
                  output_path=str(root / "out"), max_train_steps=2, learning_rate=1e-2,
                  sample_every_n_steps=2, sample_prompts=[PROMPT], sample_lora_scales=[1.0],
                  sample_steps=2, sample_height=32, sample_width=32, sample_num_frames=9,
                  sample_fps=24)
    code, log = run_stage_here("train", ["--config", write_run_config(root / "s2.yaml",
                                                                      stage2)])
    assert code == 0, log[-4000:]
    return stage2, root / "cache", list_checkpoints(root / "out")[-1], log


@pytest.mark.slow
def test_t2av_caches_sound_and_trains_the_audio_branch(t2av_run):
    """Stage 1 caches each clip's audio latents at the pipeline's length for 9 frames (the
    440 Hz and the 660 Hz clip apart); two steps of stage 2 give finite losses and move the
    LoRA of the last block's video-to-audio attention, whose output reaches only the audio
    prediction: a video-only loss leaves it at its zero start."""
    import math

    import torch

    from backend.core.progress import read_events
    from backend.data.cache import load_cached_samples
    from backend.models.lora import read_lora

    cfg, cache, lora, _ = t2av_run
    samples = load_cached_samples(cache)
    assert [tuple(s["audio_latents"].shape) for s in samples] == [(1, 9, 4), (1, 9, 4)]
    assert not torch.allclose(samples[0]["audio_latents"], samples[1]["audio_latents"])
    events, _ = read_events(f"{cfg['output_path']}/progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    tensors, _ = read_lora(lora)
    last = "transformer_blocks.1.video_to_audio_attn.to_out.0.lora_B"
    moved = [k for k in tensors if k.startswith(last)]
    assert moved and all(float(tensors[k].abs().max()) > 0 for k in moved)


@pytest.mark.slow
def test_a_t2av_sample_is_an_mp4_with_an_audio_stream(t2av_run, tmp_path):
    """The sample rendered in training keeps the pipeline's sound, and so does one rendered
    with the run's adapter and written as its ``.mp4``: PyAV reads an AAC audio stream back
    at the vocoder's rate, as long as the clip, beside the frames and a frame strip."""
    import av
    import torch
    from diffusers import LTX2Pipeline

    from backend.config.validation import validate
    from backend.families.ltx2.audio import read_clip_sound

    cfg_raw, _, _, log = t2av_run
    trained = [p for p in Path(cfg_raw["output_path"]).parent.rglob("p00-*")
               if p.suffix in (".mp4", ".webm")]
    assert trained, log[-2000:]
    with av.open(str(trained[0])) as container:
        assert [s.type for s in container.streams] == ["video", "audio"]

    cfg = validate({**cfg_raw, "dataset_base_path": "unused"}, require_inputs=False)
    family = get_family("ltx2").for_config(cfg)
    assert family.sample_suffix == ".mp4"
    pipe = LTX2Pipeline.from_pretrained(str(Path(cfg.models_dir) / REPO_ID))
    pipe.set_progress_bar_config(disable=True)
    clip = family.render(pipe, PROMPT, negative_prompt="", steps=2, cfg=3.0, height=32,
                         width=32, num_frames=9, generator=torch.Generator().manual_seed(0))
    written = family.save_sample(clip, tmp_path / f"p00-seed0{family.sample_suffix}", cfg)
    assert [p.name for p in written] == ["p00-seed0.mp4", "p00-seed0.strip.png"]
    with av.open(str(written[0])) as container:
        assert [(s.type, s.codec_context.name) for s in container.streams] == \
            [("video", "h264"), ("audio", "aac")]
    wave, rate = read_clip_sound(written[0])
    assert rate == pipe.vocoder.config.output_sampling_rate == 16000
    assert wave.shape[0] == 2 and abs(wave.shape[1] / rate - 9 / 24) < 0.15


# ------------------------------------------------------------------------------------------
# Image-to-video (extra_inputs input_image) and IC-LoRA (in_context_videos)
# ------------------------------------------------------------------------------------------
# The reference's lora/LTX-2.3-I2AV-splited.sh and lora/LTX-2-T2AV-IC-LoRA-splited.sh, the
# script path changed.
REFERENCE_I2AV = """modelscope download --dataset DiffSynth-Studio/diffsynth_example_dataset --include "ltx2/LTX-2.3-I2AV-splited/*" --local_dir ./data/diffsynth_example_dataset

# Splited Training
accelerate launch backend/stages/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/ltx2/LTX-2.3-I2AV-splited \\
  --dataset_metadata_path data/diffsynth_example_dataset/ltx2/LTX-2.3-I2AV-splited/metadata.csv \\
  --data_file_keys "video,input_audio" \\
  --extra_inputs "input_audio,input_image" \\
  --height 512 \\
  --width 768 \\
  --num_frames 121 \\
  --dataset_repeat 1 \\
  --model_id_with_origin_paths "DiffSynth-Studio/LTX-2.3-Repackage:text_encoder_post_modules.safetensors,DiffSynth-Studio/LTX-2.3-Repackage:video_vae_encoder.safetensors,DiffSynth-Studio/LTX-2.3-Repackage:audio_vae_encoder.safetensors,google/gemma-3-12b-it-qat-q4_0-unquantized:model-*.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/LTX2.3-I2AV_lora-splited-cache" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_k,to_q,to_v,to_out.0" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --task "sft:data_process"

accelerate launch backend/stages/train.py \\
  --dataset_base_path ./models/train/LTX2.3-I2AV_lora-splited-cache \\
  --data_file_keys "video,input_audio" \\
  --extra_inputs "input_audio,input_image" \\
  --height 512 \\
  --width 768 \\
  --num_frames 121 \\
  --dataset_repeat 100 \\
  --model_id_with_origin_paths "DiffSynth-Studio/LTX-2.3-Repackage:transformer.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/LTX2.3-I2AV_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_k,to_q,to_v,to_out.0" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --task "sft:train"
"""
REFERENCE_IC_LORA = """modelscope download --dataset DiffSynth-Studio/diffsynth_example_dataset --include "ltx2/LTX-2-T2AV-IC-LoRA-splited/*" --local_dir ./data/diffsynth_example_dataset

# Splited Training
accelerate launch backend/stages/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/ltx2/LTX-2-T2AV-IC-LoRA-splited \\
  --dataset_metadata_path data/diffsynth_example_dataset/ltx2/LTX-2-T2AV-IC-LoRA-splited/metadata.json \\
  --data_file_keys "video,input_audio,in_context_videos" \\
  --extra_inputs "input_audio,in_context_videos,in_context_downsample_factor,frame_rate" \\
  --height 512 \\
  --width 768 \\
  --num_frames 81 \\
  --dataset_repeat 1 \\
  --model_id_with_origin_paths "DiffSynth-Studio/LTX-2-Repackage:text_encoder_post_modules.safetensors,DiffSynth-Studio/LTX-2-Repackage:video_vae_encoder.safetensors,DiffSynth-Studio/LTX-2-Repackage:audio_vae_encoder.safetensors,google/gemma-3-12b-it-qat-q4_0-unquantized:model-*.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/LTX2-T2AV-IC-LoRA-splited-cache" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_k,to_q,to_v,to_out.0" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --task "sft:data_process"

accelerate launch backend/stages/train.py \\
  --dataset_base_path ./models/train/LTX2-T2AV-IC-LoRA-splited-cache \\
  --data_file_keys "video,input_audio,in_context_videos" \\
  --extra_inputs "input_audio,in_context_videos,in_context_downsample_factor,frame_rate" \\
  --height 512 \\
  --width 768 \\
  --num_frames 81 \\
  --dataset_repeat 100 \\
  --model_id_with_origin_paths "DiffSynth-Studio/LTX-2-Repackage:transformer.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/LTX2-T2AV-IC-LoRA" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_k,to_q,to_v,to_out.0" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --task "sft:train"
"""


def diffusers_sources(repo: str, *components: str) -> str:
    return ",".join(f"{repo}:{c}/*.safetensors" for c in components)


@pytest.mark.parametrize("script,repo,inputs,keys,frames,meta,pipeline_class", [
    (REFERENCE_I2AV, "Lightricks/LTX-2.3", "input_audio,input_image", "video,input_audio", 121,
     "ltx2/LTX-2.3-I2AV-splited/metadata.csv", "LTX2ImageToVideoPipeline"),
    (REFERENCE_IC_LORA, REPO_ID,
     "input_audio,in_context_videos,in_context_downsample_factor,frame_rate",
     "video,input_audio,in_context_videos", 81,
     "ltx2/LTX-2-T2AV-IC-LoRA-splited/metadata.json", "LTX2InContextPipeline"),
], ids=["i2av", "ic_lora"])
def test_the_reference_i2av_and_ic_lora_scripts_import_into_these_settings(
        tmp_path, script, repo, inputs, keys, frames, meta, pipeline_class):
    """The reference's scripts, only the script path changed: split training of LTX-2 with
    its repackaged files named as the diffusers repository's components (each said), the
    two stages' settings, the inputs as given, and the run bound to the conditioned
    adapter with its pipeline and sound."""
    from backend.families.ltx2.condition import ConditionAdapter
    from backend.planning.importer import import_commands

    result = import_commands(script, base_dir=tmp_path)
    cfg = result.config
    assert result.not_understood == []
    assert cfg.model_family == "ltx2"
    assert cfg.split_training and cfg.stages[:2] == ["data_process", "train"]
    assert cfg.model_id_with_origin_paths == diffusers_sources(
        repo, "transformer", "connectors", "vae", "audio_vae", "text_encoder")
    notes = "\n".join(str(n) for n in result.notes)
    assert "google/gemma-3-12b-it-qat-q4_0-unquantized:model-*.safetensors -> " \
           f"{repo}:text_encoder/*.safetensors" in notes
    assert (cfg.extra_inputs, cfg.data_file_keys, cfg.num_frames, cfg.height, cfg.width) == \
        (inputs, keys, frames, 512, 768)
    assert (cfg.lora_rank, cfg.learning_rate, cfg.num_epochs, cfg.dataset_repeat,
            cfg.lora_target_modules, cfg.remove_prefix_in_ckpt) == \
        (32, 1e-4, 5, 100, "to_k,to_q,to_v,to_out.0", "pipe.dit.")
    assert cfg.use_gradient_checkpointing
    assert cfg.dataset_metadata_path == str(tmp_path / "data/diffsynth_example_dataset" / meta)
    family = get_family("ltx2").for_config(cfg)
    assert isinstance(family, ConditionAdapter) and family.sound
    assert family.pipeline == pipeline_class and family.sample_suffix == ".mp4"
    assert "audio_vae" in family.spec.stage_components("data_process")


def test_an_ic_lora_row_without_its_reference_video_is_refused_naming_it(tmp_path):
    """With ``extra_inputs: in_context_videos`` every row names its reference video: a row
    without one, one whose file is missing and one whose downsample factor does not divide
    the clip's size into multiples of 32 are refused before any model loads, each naming
    its row; a good row gets its reference. input_image and in_context_videos together are
    refused."""
    from backend.config.validation import validate
    from backend.data.dataset import DatasetError
    from backend.data.video import check_stage_dataset
    from tests.harness.audio import make_reference_dataset

    data = make_reference_dataset(tmp_path / "data")
    rows = (data / "metadata.csv").read_text(encoding="utf-8")
    (data / "metadata.csv").write_text(
        rows.replace("video,prompt,in_context_videos",
                     "video,prompt,in_context_videos,in_context_downsample_factor")
        .replace("red_pose.mp4", "red_pose.mp4,1").replace("blue_pose.mp4", "blue_pose.mp4,")
        + 'red.mp4,"no reference, zlr style",,\n'
        'blue.mp4,"a missing reference, zlr style",gone.mp4,\n'
        'red.mp4,"half of 32, zlr style",red_pose.mp4,2\n', encoding="utf-8")
    raw = {"model_family": "ltx2", "task": "sft:data_process", "num_frames": 9,
           "height": 32, "width": 32, "dataset_base_path": str(data),
           "extra_inputs": "in_context_videos,in_context_downsample_factor",
           "data_file_keys": "video,in_context_videos",
           "dataset_metadata_path": str(data / "metadata.csv")}
    cfg = validate(raw, require_inputs=False)
    family = get_family("ltx2").for_config(cfg)
    assert family.pipeline == "LTX2InContextPipeline" and not family.sound
    with pytest.raises(DatasetError) as refused:
        check_stage_dataset(cfg, family)
    assert [str(p) for p in refused.value.problems] == [
        "metadata.csv row 3: in_context_videos: no reference video (got none; allowed a "
        "video, frames folder or image path, or a list of them)",
        "metadata.csv row 4: in_context_videos: gone.mp4 not found",
        "metadata.csv row 5: in_context_downsample_factor: not a whole number that divides "
        "the clip's size into multiples of 32 (got '2'; allowed e.g. 1 or 2)"]

    (data / "metadata.csv").write_text("\n".join(
        (data / "metadata.csv").read_text(encoding="utf-8").splitlines()[:3]) + "\n",
        encoding="utf-8")
    records = check_stage_dataset(cfg, family)
    assert [(r.reference.path.name, r.reference.factor) for r in records] == \
        [("red_pose.mp4", 1), ("blue_pose.mp4", 1)]
    pixels = records[1].reference.load()  # 5 frames, padded with black to the clip's 9
    assert tuple(pixels.shape) == (1, 3, 9, 32, 32)
    assert float(pixels[:, :, 5:].max()) == -1.0 and float(pixels[:, :, :5].max()) > 0.9

    with pytest.raises(ValueError, match="input_image and in_context_videos together"):
        get_family("ltx2").for_config(validate(
            {**raw, "extra_inputs": "input_image,in_context_videos"}, require_inputs=False))
    plain = validate({**raw, "extra_inputs": "", "data_file_keys": "video"},
                     require_inputs=False)
    assert [r.reference for r in check_stage_dataset(plain, get_family("ltx2"))] == \
        [None, None]
    wan = validate({**raw, "model_family": "wan"}, require_inputs=False)
    with pytest.raises(DatasetError, match="extra_inputs: .* takes no reference video"):
        check_stage_dataset(wan, get_family("wan").for_config(wan))


def conditioned_run(root: Path, data: Path, inputs: str, keys: str, **stage2):
    """Stage 1 and two steps of stage 2 of the tiny LTX-2 in this process, with
    ``extra_inputs`` ``inputs``: (config of stage 2, cache folder, stage 2's output)."""
    from tests.harness.families import run_stage_here, write_run_config

    base = {"model_family": "ltx2", "models_dir": str(root / "models"), "offline": True,
            "extra_inputs": inputs, "data_file_keys": keys, "num_frames": 9, "height": 32,
            "width": 32, "mixed_precision": "no", "lora_rank": 4, "seed": 0,
            "dataset_num_workers": 0}
    stage1 = dict(base, task="sft:data_process", dataset_base_path=str(data),
                  dataset_metadata_path=str(data / "metadata.csv"),
                  output_path=str(root / "cache"))
    code, log = run_stage_here("train", ["--config", write_run_config(root / "s1.yaml",
                                                                      stage1)])
    assert code == 0, log[-4000:]
    second = dict(base, task="sft:train", dataset_base_path=str(root / "cache"),
                  output_path=str(root / "out"), max_train_steps=2, learning_rate=1e-2,
                  **stage2)
    code, log = run_stage_here("train", ["--config", write_run_config(root / "s2.yaml",
                                                                      second)])
    assert code == 0, log[-4000:]
    return second, root / "cache", log


def transformer_inputs(family, transformer, sample, noise, index=500):
    """(the loss, the keyword arguments the transformer was called with, its video
    prediction [B, tokens, C]) of one ``loss_at``."""
    import torch

    seen = {}

    def before(_module, _args, kwargs):
        seen.update(kwargs)

    def after(_module, _args, _kwargs, out):
        seen["predicted"], seen["predicted_audio"] = out[0], out[1]

    handles = [transformer.register_forward_pre_hook(before, with_kwargs=True),
               transformer.register_forward_hook(after, with_kwargs=True)]
    try:
        with torch.no_grad():
            loss = family.loss_at(transformer, sample, family.training_schedule(), index,
                                  noise, torch.float32)
    finally:
        for h in handles:
            h.remove()
    return float(loss), seen


@pytest.mark.slow
def test_i2av_keeps_the_first_latent_frame_clean_and_samples_through_the_i2v_pipeline(
        tmp_path):
    """Image-to-video with sound (the reference's I2AV: extra_inputs input_audio,input_image)
    on the tiny model: stage 1 caches each clip's first frame encoded alone (what
    ``LTX2ImageToVideoPipeline.prepare_latents`` computes) beside its audio latents; the
    loss feeds that latent as the first latent frame at timestep 0 (the other tokens and
    the audio at the clip's) and leaves it out (noise drawn there changes nothing); two
    steps give finite losses and the sample is rendered through the image-to-video
    pipeline from the first clip's first frame, an MP4 with its sound."""
    import math

    import av
    import torch
    from diffusers import LTX2Pipeline

    from backend.config.validation import validate
    from backend.core.progress import read_events
    from backend.data.cache import load_cached_samples
    from backend.data.video import load_clip
    from backend.families.ltx2.adapter import audio_noise
    from tests.harness.audio import make_sound_dataset

    get_family("ltx2").build_tiny(tmp_path / "models" / REPO_ID)
    data = make_sound_dataset(tmp_path / "data")
    raw, cache, log = conditioned_run(
        tmp_path, data, "input_image,input_audio", "video,input_audio",
        sample_every_n_steps=2, sample_prompts=[PROMPT], sample_lora_scales=[1.0],
        sample_images=[str(data / "beep.mp4")], sample_steps=2, sample_height=32,
        sample_width=32, sample_num_frames=9, sample_fps=24)
    cfg = validate({**raw, "dataset_base_path": str(data)}, require_inputs=False)
    family = get_family("ltx2").for_config(cfg)
    assert family.pipeline == "LTX2ImageToVideoPipeline" and family.sound

    samples = load_cached_samples(cache)
    assert [tuple(s["first_frame"].shape) for s in samples] == [(1, 8, 1, 1, 1)] * 2
    assert all("audio_latents" in s for s in samples)
    pipe = pipeline(tmp_path / "models")
    pixels = load_clip(data / "beep.mp4", cfg)
    z = pipe.vae.encode(pixels[:, :, :1]).latent_dist.mode()
    z = LTX2Pipeline._normalize_latents(z, pipe.vae.latents_mean, pipe.vae.latents_std)
    assert any(torch.allclose(s["first_frame"], z, atol=1e-5) for s in samples)

    sample = samples[0]
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(3))
    loss, seen = transformer_inputs(family, pipe.transformer, sample, noise)
    t = float(family.training_schedule().timesteps[500])
    per_token = seen["timestep"][0]
    assert per_token.shape == (2,) and float(per_token[0]) == 0.0  # 2 latent frames of 1x1
    assert float(per_token[1]) == pytest.approx(t)
    assert float(seen["audio_timestep"][0]) == pytest.approx(t)
    assert torch.allclose(seen["hidden_states"][0, 0], sample["first_frame"].flatten())
    assert not torch.allclose(seen["hidden_states"][0, 1], sample["latents"][0, :, 1].flatten())
    # The video's loss is the second latent frame's alone (the first token's prediction
    # left out), the audio's added.
    mse = torch.nn.functional.mse_loss
    a0 = sample["audio_latents"]
    sound = mse(seen["predicted_audio"], audio_noise(noise, a0.shape) - a0)
    target = (noise - sample["latents"])[0].flatten(1).T  # [tokens, C]
    weight = float(family.training_schedule().weights[500])
    assert loss == pytest.approx(
        float(mse(seen["predicted"][0, 1], target[1]) + sound) * weight, rel=1e-5)
    assert loss != pytest.approx(float(mse(seen["predicted"][0], target) + sound) * weight,
                                 rel=1e-3)

    events, _ = read_events(f"{raw['output_path']}/progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    trained = [p for p in Path(raw["output_path"]).parent.rglob("p00-*") if p.suffix == ".mp4"]
    assert trained, log[-2000:]
    with av.open(str(trained[0])) as container:
        assert [s.type for s in container.streams] == ["video", "audio"]
        assert container.streams.video[0].frames in (0, 9)


@pytest.mark.slow
def test_ic_lora_trains_with_the_reference_tokens_and_samples_through_its_pipeline(tmp_path):
    """IC-LoRA (extra_inputs in_context_videos) on the tiny model: stage 1 caches each row's
    reference video latents (the shorter one padded with black frames to the clip's); the
    loss appends them after the clip's tokens at timestep 0 with their own positions, and
    only the clip's tokens count (noise drawn for them changes the loss, the reference's
    cannot: they are clean); two steps give finite losses and a LoRA, and a clip renders
    through ``LTX2InContextPipeline`` from a reference."""
    import math

    import numpy as np
    import torch
    from diffusers import LTX2InContextPipeline
    from PIL import Image

    from backend.config.validation import validate
    from backend.core.progress import read_events
    from backend.core.rundir import list_checkpoints
    from backend.data.cache import load_cached_samples
    from backend.models.lora import read_lora
    from tests.harness.audio import make_reference_dataset

    get_family("ltx2").build_tiny(tmp_path / "models" / REPO_ID)
    data = make_reference_dataset(tmp_path / "data")
    raw, cache, log = conditioned_run(tmp_path, data, "in_context_videos",
                                      "video,in_context_videos")
    cfg = validate({**raw, "dataset_base_path": str(data)}, require_inputs=False)
    family = get_family("ltx2").for_config(cfg)
    assert family.pipeline == "LTX2InContextPipeline" and not family.sound

    samples = load_cached_samples(cache)
    assert [tuple(s["reference_latents"].shape) for s in samples] == [(1, 8, 2, 1, 1)] * 2
    assert [float(s["reference_scale"][0]) for s in samples] == [1.0, 1.0]
    assert not torch.allclose(samples[0]["reference_latents"], samples[1]["reference_latents"])

    pipe = LTX2InContextPipeline.from_pretrained(str(tmp_path / "models" / REPO_ID))
    pipe.set_progress_bar_config(disable=True)
    sample = samples[0]
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(3))
    loss, seen = transformer_inputs(family, pipe.transformer, sample, noise)
    assert seen["hidden_states"].shape[1] == 2 + 2  # the clip's 2 tokens, the reference's 2
    assert torch.allclose(seen["hidden_states"][0, 2:],
                          sample["reference_latents"][0].flatten(1).T)
    assert [float(x) for x in seen["timestep"][0, 2:]] == [0.0, 0.0]
    assert float(seen["timestep"][0, 0]) > 0
    coords = seen["video_coords"]
    assert coords.shape == (1, 3, 4, 2) and torch.equal(coords[:, :, 2:], coords[:, :, :2])
    other = dict(sample, reference_latents=samples[1]["reference_latents"])
    assert transformer_inputs(family, pipe.transformer, other, noise)[0] != \
        pytest.approx(loss, rel=1e-6)  # the reference reaches the prediction

    events, _ = read_events(f"{raw['output_path']}/progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    tensors, _ = read_lora(list_checkpoints(Path(raw["output_path"]))[-1])
    assert any(float(v.abs().max()) > 0 for k, v in tensors.items() if ".lora_B" in k)

    reference = Image.fromarray(np.full((32, 32, 3), 200, np.uint8))
    clip = family.render(pipe, PROMPT, negative_prompt="", steps=2, cfg=3.0, height=32,
                         width=32, num_frames=9, images=[reference] * 9,
                         generator=torch.Generator().manual_seed(0))
    assert clip.shape == (9, 32, 32, 3) and np.isfinite(clip).all()
