"""LTX-2.3's vocoder with bandwidth extension (``LTX2VocoderWithBWE``) in the LTX-2 family:

- a folder holding it (the tiny one of ``tiny.build_bwe_vocoder``) is found as the run's
  ``vocoder`` component from its model id and loads as that class, LTX-2's folder still as
  ``LTX2Vocoder``; a folder of another vocoder class is neither, its refusal naming the
  vocoder and the class;
- the mel front end accepts the released LTX-2.3 vocoder (``published.VOCODER_2_3``) with the
  audio VAE it shares with LTX-2 (its vocoder writes one hop per mel frame at 16 kHz, the
  extension 48 kHz), and refuses one that does not fit, naming the vocoder;
- a sample of a run with sound, rendered with the tiny LTX-2 pipeline and the tiny BWE
  vocoder through the family's own loading, rendering and writing, carries its sound at
  48 kHz, as PyAV reads the clip back.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.config.schema import RunConfig
from backend.families import get_family
from tests.harness.families import family_cases

REPO_2_3 = "Lightricks/LTX-2.3"
# The released audio VAE's config (diffusers layout), LTX-2.3's as LTX-2's.
RELEASED_AUDIO_VAE = {"sample_rate": 16000, "mel_hop_length": 160, "mel_bins": 64,
                      "in_channels": 2}
PROMPT = "a red ball rolls from left to right, zlr style"


def save_vocoder(vocoder, folder: Path) -> Path:
    vocoder.save_pretrained(folder, safe_serialization=True)
    return folder


def vocoder_config(models: Path) -> RunConfig:
    return RunConfig(model_family="ltx2", models_dir=str(models), offline=True,
                     model_id_with_origin_paths=f"{REPO_2_3}:vocoder/*.safetensors")


def test_a_bwe_vocoder_folder_is_the_vocoder_and_loads_as_its_class(tmp_path):
    """The tiny LTX-2.3 vocoder under ``Lightricks/LTX-2.3/vocoder`` resolves as the run's
    vocoder and loads as ``LTX2VocoderWithBWE`` with the weights saved (the same sound from
    the same mel); LTX-2's folder loads as ``LTX2Vocoder``; a folder of another class is no
    vocoder (the sources give none, the message listing the classes known) and loading it
    is refused, naming the vocoder and the class."""
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

    from backend.families.ltx2 import tiny
    from backend.models.hub import HubError, resolve_component_dirs

    load = get_family("ltx2").loaders["vocoder"]
    models = tmp_path / "models"
    bwe = tiny.build_bwe_vocoder(0)
    folder = save_vocoder(bwe, models / REPO_2_3 / "vocoder")
    assert json.loads((folder / "config.json").read_text())["_class_name"] == \
        "LTX2VocoderWithBWE"
    assert resolve_component_dirs(vocoder_config(models), ["vocoder"]) == {"vocoder": folder}
    loaded = load(folder)
    assert type(loaded) is LTX2VocoderWithBWE
    mel = torch.randn(1, 2, 5, tiny.AUDIO_VAE_CONFIG["mel_bins"])
    with torch.no_grad():
        sound = loaded(mel)
        assert torch.equal(sound, bwe(mel))
    # 5 mel frames: 5 hops of the 16 kHz vocoder, 3x at 48 kHz.
    assert tuple(sound.shape) == (1, 2, 5 * 160 * 3)

    plain = save_vocoder(tiny.build_sound_components(0)[1], tmp_path / "ltx2" / "vocoder")
    assert type(load(plain)) is LTX2Vocoder

    other = models / REPO_2_3 / "vocoder"
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "_class_name": "SpeechT5HifiGan"}))
    with pytest.raises(HubError) as missing:
        resolve_component_dirs(vocoder_config(models), ["vocoder"])
    assert "model sources give no vocoder" in str(missing.value)
    assert "LTX2VocoderWithBWE" in str(missing.value)
    with pytest.raises(ValueError) as refused:
        load(other)
    assert str(refused.value).startswith("vocoder: ")
    assert "SpeechT5HifiGan" in str(refused.value) and "LTX2VocoderWithBWE" in str(refused.value)
    assert refused.value.args[0].code == "data.vocoder_class"


def test_the_mel_front_end_takes_the_released_bwe_vocoder_and_refuses_a_misfit():
    """``VOCODER_2_3`` with the released audio VAE: the mel settings are the VAE's, and the
    check reads the BWE vocoder's 16 kHz stage (its 48 kHz output is not one VAE hop per
    frame, so a check of ``output_sampling_rate`` alone would refuse it); the tiny BWE
    vocoder fits the tiny audio VAE. Refused, each naming the vocoder: a base vocoder that
    writes two hops a frame, an extension whose frames do not fill its hop at 48 kHz, other
    input channels, another class."""
    from backend.families.ltx2 import tiny
    from backend.families.ltx2.audio import MelSettings
    from backend.families.ltx2.published import VOCODER, VOCODER_2_3

    s = MelSettings.from_configs(RELEASED_AUDIO_VAE, VOCODER_2_3)
    assert (s.sample_rate, s.hop_length, s.mel_bins, s.channels) == (16000, 160, 64, 2)
    assert MelSettings.from_configs(RELEASED_AUDIO_VAE, VOCODER) == s
    vae, bwe = tiny.build_sound_components(0, bwe=True)
    assert MelSettings.from_configs(vae.config, bwe.config).mel_bins == 8
    assert bwe.config.output_sampling_rate == 48000

    misfits = {
        "data.vocoder_hop": dict(VOCODER_2_3, upsample_factors=[5, 2, 2, 2, 2, 2, 2]),
        "data.vocoder_extension": dict(VOCODER_2_3, bwe_upsample_factors=[6, 5, 2, 2]),
        "data.vocoder_channels": dict(VOCODER_2_3, in_channels=64),
        "data.vocoder_class": dict(VOCODER_2_3, _class_name="SpeechT5HifiGan"),
    }
    for code, config in misfits.items():
        with pytest.raises(ValueError) as refused:
            MelSettings.from_configs(RELEASED_AUDIO_VAE, config)
        msg = refused.value.args[0]
        assert msg.code == code and str(msg).startswith("vocoder: "), code
        assert msg.text("zh").startswith("`vocoder`："), code
    with pytest.raises(ValueError, match=r"not one hop .*got 320 samples at 16000 Hz"):
        MelSettings.from_configs(RELEASED_AUDIO_VAE, misfits["data.vocoder_hop"])
    with pytest.raises(ValueError, match=r"got 120 samples at 48000 Hz; allowed 80 samples"):
        MelSettings.from_configs(RELEASED_AUDIO_VAE, misfits["data.vocoder_extension"])


@pytest.mark.slow
def test_a_sample_with_the_bwe_vocoder_carries_its_sound_at_48_khz(family_runs, tmp_path):
    """The session's tiny LTX-2 pipeline with the tiny BWE vocoder as its vocoder folder,
    loaded by the family's run with sound (the vocoder by its class, checked against the
    audio VAE), renders a 9-frame clip whose sound is the vocoder's at 48 kHz (three
    samples for each of the base vocoder's, a whole number of the extension's frames), and
    the ``.mp4`` it writes has an AAC stream PyAV reads back at 48 kHz, as long as that
    sound."""
    import av
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2VocoderWithBWE

    from backend.families.ltx2 import tiny
    from backend.families.ltx2.audio import read_clip_sound
    from backend.families.ltx2.t2av import SoundAdapter

    case = next(c for c in family_cases() if c.family == "ltx2")
    pipeline = family_runs.models(case) / "Lightricks" / "LTX-2"
    cfg = RunConfig(model_family="ltx2", extra_inputs="input_audio",
                    data_file_keys="video,input_audio", sample_fps=24)
    family = get_family("ltx2").for_config(cfg)
    assert isinstance(family, SoundAdapter)
    dirs = {name: pipeline / name for name in family.spec.stage_components("sample")}
    dirs["vocoder"] = save_vocoder(tiny.build_bwe_vocoder(0), tmp_path / "vocoder")
    pipe = family.load_pipeline(dirs, torch.float32)
    pipe.set_progress_bar_config(disable=True)
    assert type(pipe.vocoder) is LTX2VocoderWithBWE

    clip = family.render(pipe, PROMPT, negative_prompt="", steps=2, cfg=1.0, height=32,
                         width=32, num_frames=9, generator=torch.Generator().manual_seed(0))
    assert clip.sample_rate == 48000
    samples = clip.waveform.shape[-1]
    assert clip.waveform.shape[0] == 2 and samples % (3 * 160) == 0 and samples % 240 == 0
    assert float(clip.waveform.abs().max()) > 0
    written = family.save_sample(clip, tmp_path / "p00-seed0.mp4", cfg)
    assert [p.name for p in written] == ["p00-seed0.mp4", "p00-seed0.strip.png"]
    with av.open(str(written[0])) as container:
        audio = container.streams.audio[0]
        assert (audio.codec_context.name, audio.rate) == ("aac", 48000)
    wave, rate = read_clip_sound(written[0])
    assert rate == 48000 and wave.shape[0] == 2
    assert abs(wave.shape[1] - samples) <= 2048  # AAC frames of 1024 samples
