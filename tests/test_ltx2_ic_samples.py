"""IC-LoRA samples (LTX-2, ``extra_inputs: in_context_videos``) condition on a whole reference
clip, as ``LTX2InContextPipeline`` runs an IC-LoRA and as training conditions on a row's
reference video:

- each prompt's clip is its line of ``sample_videos``, else the reference video of the
  dataset row whose caption is the prompt, else of the first row, said in the log; a clip
  too short for ``sample_num_frames``, unreadable or missing is refused before any model
  loads, naming the field, the line or row and the file; ``sample_images`` on such a run
  and ``sample_videos`` on a run without references are refused, naming the field;
- the sample stage of a tiny IC-LoRA run (the session's tiny LTX-2 and its trained LoRA,
  ``family_runs``) renders different clips from two different reference clips, and the
  reference tokens the transformer receives while sampling are the latents training caches
  for that clip (the video VAE's mode, normalised).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.families import get_family
from backend.training.samples import checked_sample_inputs, reference_frames
from tests.harness.clips import moving_square

RED = "a red ball rolls from left to right, zlr style"
BLUE = "a blue square slides from right to left, zlr style"
FRAMES = 9  # LTX-2's shortest clip above one frame (8k+1)


def _clip(path: Path, colour, dx: int, frames: int = FRAMES) -> Path:
    from backend.core.media import write_video

    return write_video(moving_square(colour, dx, n=frames), path, fps=24)


def reference_dataset(folder: Path) -> Path:
    """Rows (video, prompt, in_context_videos): a red clip with a red reference, a blue clip
    with a blue one (both 9 frames); beside them a 5-frame clip and a file that is no
    video."""
    folder.mkdir(parents=True, exist_ok=True)
    _clip(folder / "red.mp4", (230, 30, 30), 2)
    _clip(folder / "blue.mp4", (30, 60, 230), -2)
    _clip(folder / "red_pose.mp4", (200, 20, 20), 3)
    _clip(folder / "blue_pose.mp4", (20, 20, 200), -3)
    _clip(folder / "short.mp4", (20, 200, 20), 1, frames=5)
    (folder / "broken.mp4").write_bytes(b"not a video at all")
    (folder / "metadata.csv").write_text(
        "video,prompt,in_context_videos\n"
        f'red.mp4,"{RED}",red_pose.mp4\n'
        f'blue.mp4,"{BLUE}",blue_pose.mp4\n', encoding="utf-8")
    return folder


def ic_config(data: Path, **changes):
    return validate({"model_family": "ltx2", "offline": True,
                     "extra_inputs": "in_context_videos",
                     "data_file_keys": "video,in_context_videos",
                     "dataset_base_path": str(data),
                     "dataset_metadata_path": str(data / "metadata.csv"), "num_frames": FRAMES,
                     "height": 32, "width": 32, "sample_height": 32, "sample_width": 32,
                     "sample_num_frames": FRAMES, **changes}, require_inputs=False)


def test_a_prompt_takes_its_line_else_the_row_of_its_caption_else_the_first_row(tmp_path):
    data = reference_dataset(tmp_path / "data")
    said: list[str] = []
    cfg = ic_config(data, sample_prompts=[BLUE, "a green cone", RED],
                    sample_videos=["", "", str(data / "blue_pose.mp4")])
    assert checked_sample_inputs(cfg, said.append) == [
        (str(data / "blue_pose.mp4"),), (str(data / "red_pose.mp4"),),
        (str(data / "blue_pose.mp4"),)]
    assert said == [
        "[sample] prompt 1: the reference video of metadata.csv row 2 (blue_pose.mp4), whose "
        "caption is the prompt",
        "[sample] prompt 2: the reference video of metadata.csv row 1 (red_pose.mp4), the "
        "first row (no row's caption is the prompt)"]
    # The frames the sample conditions on: the clip at the sample's size, all 9 of them.
    frames = reference_frames(cfg, data / "blue_pose.mp4")
    assert len(frames) == FRAMES and frames[0].size == (32, 32)


def test_a_short_unreadable_or_missing_reference_is_refused_naming_field_and_file(tmp_path):
    data = reference_dataset(tmp_path / "data")
    cfg = ic_config(data, sample_prompts=["a", "b", "c", "d"],
                    sample_videos=[str(data / "short.mp4"), str(data / "broken.mp4"),
                                   str(data / "gone.mp4"), str(data / "red_pose.mp4")])
    with pytest.raises(ConfigError) as e:
        checked_sample_inputs(cfg)
    problems = e.value.problems
    assert len(problems) == 3, problems
    assert problems[0].startswith("sample_videos: line 1: short.mp4 cannot condition a sample "
                                  "of sample_num_frames 9: too short: 5 frames")
    assert problems[1].startswith("sample_videos: line 2: broken.mp4 cannot condition a "
                                  "sample of sample_num_frames 9: cannot decode video "
                                  "broken.mp4")
    assert problems[2] == (f"sample_videos: line 3: reference clip not found (got "
                           f"{str(data / 'gone.mp4')!r}; allowed a video file, frames folder "
                           f"or image)")
    assert [p.code for p in problems] == ["data.sample_video_unusable"] * 2 + [
        "data.sample_video_not_found"]
    # A dataset row's reference too short for the sample names its row and the way out.
    (data / "metadata.csv").write_text(
        f'video,prompt,in_context_videos\nred.mp4,"{RED}",short.mp4\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sample_videos: prompt 1 takes the reference "
                       r"video of metadata.csv row 1, short.mp4, which cannot condition"):
        checked_sample_inputs(ic_config(data, sample_prompts=[RED]))
    # No rows to take one from (a train-only run's cache) and no line: every prompt named.
    with pytest.raises(ConfigError, match=r"sample_videos: the model renders from a "
                       r"reference video; prompt\(s\) 1, 2 have none"):
        checked_sample_inputs(ic_config(tmp_path / "cache", sample_prompts=["a", "b"]))
    with pytest.raises(ConfigError, match="sample_videos: more lines than sample_prompts"):
        checked_sample_inputs(ic_config(data, sample_prompts=["a"],
                                        sample_videos=["x.mp4", "y.mp4"]))


def test_sample_images_on_an_ic_lora_run_and_sample_videos_elsewhere_are_refused(tmp_path):
    data = reference_dataset(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"sample_images: LTX-2 IC-LoRA conditions samples "
                       r"on reference videos \(got 1 line\(s\); allowed none, with each "
                       r"prompt's reference clip in sample_videos\)"):
        checked_sample_inputs(ic_config(data, sample_prompts=[RED],
                                        sample_images=[str(data / "red_pose.mp4")]))
    plain = ic_config(data, extra_inputs="", data_file_keys="video", sample_prompts=[RED],
                      sample_videos=[str(data / "red_pose.mp4")])
    with pytest.raises(ConfigError, match=r"sample_videos: .* takes no reference video "
                       r"\(got 1 line\(s\); allowed none\)"):
        checked_sample_inputs(plain)


@pytest.mark.slow
def test_the_sample_stage_renders_from_the_whole_reference_clip(family_runs, tmp_path):
    """The sample stage twice on the session's tiny LTX-2 and its LoRA as an IC-LoRA run,
    one prompt, the same seed, a red and then a blue reference clip: the two clips differ.
    Then the pipeline's reference tokens while rendering are what stage 1 caches of that
    clip (``ConditionEncoding.encode_image``): all 9 frames reach the transformer."""
    import numpy as np
    import torch
    from diffusers import LTX2InContextPipeline

    from backend.data.video import load_clip, read_video_frames
    from backend.families.ltx2.condition import ConditionEncoder
    from backend.training.samples import read_index
    from tests.harness.families import family_cases, run_stage_here, write_run_config

    case = next(c for c in family_cases() if c.family == "ltx2")
    lora, raw, _ = family_runs.trained(case)
    data = reference_dataset(tmp_path / "data")
    raw = {**raw, "extra_inputs": "in_context_videos",
           "data_file_keys": "video,in_context_videos", "dataset_base_path": str(data), "dataset_metadata_path": str(data / "metadata.csv"),
           "progress_file": str(tmp_path / "progress.jsonl"), "sample_steps": 2,
           "sample_cfg": 1.0, "sample_num_frames": FRAMES, "sample_height": 32,
           "sample_width": 32}
    clips = []
    for name in ("red_pose.mp4", "blue_pose.mp4"):
        out = tmp_path / name.split(".")[0]
        code, log = run_stage_here("sample", [
            "--config", write_run_config(tmp_path / f"{out.name}.yaml", raw),
            "--checkpoints", lora, "--output_dir", out, "--sample_prompts", RED,
            "--sample_lora_scales", "1", "--sample_videos", str(data / name)])
        assert code == 0, log[-6000:]
        [entry] = read_index(out)
        assert entry["inputs"] == [str(data / name)]
        frames = np.stack([np.asarray(f, dtype=np.float32)
                           for f in read_video_frames(out / entry["image"])])
        assert frames.shape == (FRAMES, 32, 32, 3)
        clips.append(frames)
    assert np.abs(clips[0] - clips[1]).mean() > 1.0, "the reference clip does not reach it"

    cfg = ic_config(data, sample_prompts=[RED], models_dir=raw["models_dir"])
    family = get_family("ltx2").for_config(cfg)
    models = Path(raw["models_dir"]) / "Lightricks" / "LTX-2"
    pipe = LTX2InContextPipeline.from_pretrained(str(models))
    pipe.set_progress_bar_config(disable=True)
    seen = {}

    def first_call(_module, _args, kwargs):
        seen.setdefault("tokens", kwargs["hidden_states"])

    hook = pipe.transformer.register_forward_pre_hook(first_call, with_kwargs=True)
    try:
        family.render(pipe, RED, negative_prompt="", steps=2, cfg=1.0, height=32, width=32,
                      num_frames=FRAMES, generator=torch.Generator().manual_seed(0),
                      images=reference_frames(cfg, data / "blue_pose.mp4"))
    finally:
        hook.remove()
    encoder = ConditionEncoder(pipe.text_encoder, pipe.tokenizer, pipe.connectors, pipe.vae,
                               reference=True)
    cached = encoder.encode_image(load_clip(data / "blue_pose.mp4", cfg))  # [1, C, 2, 1, 1]
    assert tuple(cached.shape[2:]) == (2, 1, 1)
    ref = seen["tokens"][0, -2:]  # the clip's 2 latent frames of 1x1 come first, then these
    assert torch.allclose(ref, cached[0].flatten(1).T, atol=1e-5)
