"""A full checkpoint as one file ComfyUI or the reference trainer loads
(``backend/models/full_export.py``), on tiny transformers of every family saved with
``backend.models.full.save_component`` (no training: the export reads only the folder).

Each family's ComfyUI key list below is written from ComfyUI's own source, not from the
project's maps; the round trip goes through diffusers' own single-file converters (its
readers of the original / ComfyUI layouts), so a wrong name, a wrong fuse order or a swapped
half fails twice."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from diffusers.loaders import single_file_utils as sfu
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from backend.families import flux2
from backend.models import full, full_export
from backend.models.full_export import FullExportError


# ------------------------------------------------------------------------------------------
# Tiny transformers
# ------------------------------------------------------------------------------------------
def tiny_transformer(family: str):
    """A random-init tiny transformer of ``family`` (float32), seed 0."""
    torch.manual_seed(0)
    if family == "qwen_image":
        from diffusers import QwenImageTransformer2DModel

        from backend.families.qwen_image.tiny import TRANSFORMER_CONFIG
        return QwenImageTransformer2DModel(**TRANSFORMER_CONFIG).eval()
    if family in ("flux2_klein", "flux2_dev"):
        from diffusers import Flux2Transformer2DModel
        return Flux2Transformer2DModel(**flux2.TINY_TRANSFORMER,
                                       guidance_embeds=family == "flux2_dev").eval()
    if family == "z_image":
        from backend.families.z_image.tiny import build_transformer
        return build_transformer(0)
    if family == "wan":  # the image-to-video transformer: every Wan tensor kind
        from backend.families.wan.tiny import I2V_TRANSFORMER, build_transformer
        return build_transformer(0, I2V_TRANSFORMER)
    if family == "krea2":
        from backend.families.krea2.tiny import build_transformer
        return build_transformer(0)
    if family == "qwen_image_21":
        from backend.families.qwen_image_21.tiny import build_transformer
        return build_transformer(0)
    raise AssertionError(family)


def _randomise(model) -> None:
    """Every parameter random (zero-initialised ones too), so a swap or a misplaced part
    shows."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


def saved(tmp_path: Path, family: str, dtype=torch.float32):
    """(model, checkpoint folder ``out/step-3``) in several shards, as training saves it."""
    model = tiny_transformer(family)
    _randomise(model)
    folder = full.save_component(model, tmp_path / "out" / "step-3", dtype=dtype,
                                 info={"step": 3, "model_family": family},
                                 max_shard_bytes=16_000)
    assert len(list(folder.glob("*.safetensors"))) > 1
    return model, folder


# ------------------------------------------------------------------------------------------
# ComfyUI's key lists, from ComfyUI's source
# ------------------------------------------------------------------------------------------
def blocks(keys, prefix: str) -> list[int]:
    return sorted({int(m[1]) for k in keys if (m := re.match(rf"{prefix}\.(\d+)\.", k))})


def comfyui_keys(family: str, model) -> set[str]:
    """The keys ComfyUI's model of ``family`` loads for ``model``'s architecture."""
    sd = model.state_dict()
    wb = ("weight", "bias")
    out: set[str] = set()
    if family == "qwen_image":
        # comfy/ldm/qwen_image/model.py QwenImageTransformer2DModel: diffusers' names.
        out |= {f"time_text_embed.timestep_embedder.linear_{i}.{e}" for i in (1, 2) for e in wb}
        out |= {"txt_norm.weight"} | {f"{n}.{e}" for n in ("img_in", "txt_in", "norm_out.linear",
                                                              "proj_out") for e in wb}
        for i in blocks(sd, "transformer_blocks"):
            p = f"transformer_blocks.{i}."
            out |= {f"{p}attn.{n}.weight" for n in ("norm_q", "norm_k", "norm_added_q",
                                                    "norm_added_k")}
            out |= {f"{p}{n}.{e}" for e in wb for n in (
                "img_mod.1", "txt_mod.1", "attn.to_q", "attn.to_k", "attn.to_v",
                "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0",
                "attn.to_add_out", "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj",
                "txt_mlp.net.2")}
    elif family in ("flux2_klein", "flux2_dev"):
        # comfy/utils.py flux_to_diffusers (the original FLUX names; no biases in FLUX.2),
        # and FLUX.2's embeddings and modulations as diffusers'
        # convert_flux2_transformer_checkpoint_to_diffusers reads them.
        for i in blocks(sd, "transformer_blocks"):
            p = f"double_blocks.{i}."
            out |= {p + n for n in (
                "img_attn.qkv.weight", "txt_attn.qkv.weight", "img_attn.proj.weight",
                "txt_attn.proj.weight", "img_mlp.0.weight", "img_mlp.2.weight",
                "txt_mlp.0.weight", "txt_mlp.2.weight", "img_attn.norm.query_norm.scale",
                "img_attn.norm.key_norm.scale", "txt_attn.norm.query_norm.scale",
                "txt_attn.norm.key_norm.scale")}
        for i in blocks(sd, "single_transformer_blocks"):
            p = f"single_blocks.{i}."
            out |= {p + n for n in ("linear1.weight", "linear2.weight",
                                    "norm.query_norm.scale", "norm.key_norm.scale")}
        out |= {"img_in.weight", "txt_in.weight", "final_layer.linear.weight",
                "final_layer.adaLN_modulation.1.weight", "time_in.in_layer.weight",
                "time_in.out_layer.weight", "double_stream_modulation_img.lin.weight",
                "double_stream_modulation_txt.lin.weight", "single_stream_modulation.lin.weight"}
        if family == "flux2_dev":
            out |= {"guidance_in.in_layer.weight", "guidance_in.out_layer.weight"}
    elif family == "z_image":
        # comfy/utils.py z_image_to_diffusers (Lumina 2 NextDiT names).
        for where in ("layers", "noise_refiner", "context_refiner"):
            for i in blocks(sd, where):
                p = f"{where}.{i}."
                out |= {p + n for n in (
                    "attention.qkv.weight", "attention.out.weight", "attention.q_norm.weight",
                    "attention.k_norm.weight", "attention_norm1.weight",
                    "attention_norm2.weight", "ffn_norm1.weight", "ffn_norm2.weight",
                    "feed_forward.w1.weight", "feed_forward.w2.weight",
                    "feed_forward.w3.weight")}
                if where != "context_refiner":
                    out |= {p + "adaLN_modulation.0.weight", p + "adaLN_modulation.0.bias"}
        out |= {f"{n}.{e}" for n in ("final_layer.linear", "final_layer.adaLN_modulation.1",
                                     "x_embedder", "cap_embedder.1", "t_embedder.mlp.0",
                                     "t_embedder.mlp.2") for e in wb}
        out |= {"x_pad_token", "cap_pad_token", "cap_embedder.0.weight"}
    elif family == "wan":
        # comfy/ldm/wan/model.py WanModel (the original names; image-to-video's img_emb and
        # k_img / v_img / norm_k_img).
        for i in blocks(sd, "blocks"):
            p = f"blocks.{i}."
            out |= {f"{p}{a}.{n}.{e}" for a in ("self_attn", "cross_attn")
                    for n in ("q", "k", "v", "o") for e in wb}
            out |= {f"{p}{a}.{n}.weight" for a in ("self_attn", "cross_attn")
                    for n in ("norm_q", "norm_k")}
            out |= {f"{p}cross_attn.{n}.{e}" for n in ("k_img", "v_img") for e in wb}
            out |= {f"{p}cross_attn.norm_k_img.weight", f"{p}modulation"}
            out |= {f"{p}{n}.{e}" for n in ("norm3", "ffn.0", "ffn.2") for e in wb}
        out |= {f"{n}.{e}" for n in ("patch_embedding", "text_embedding.0", "text_embedding.2",
                                     "time_embedding.0", "time_embedding.2",
                                     "time_projection.1", "head.head", "img_emb.proj.0",
                                     "img_emb.proj.1", "img_emb.proj.3", "img_emb.proj.4")
                for e in wb}
        out |= {"head.modulation"}
    elif family == "krea2":
        # comfy/ldm/krea2/model.py SingleStreamDiT.
        def block(p: str, modulated: bool) -> set[str]:
            names = {f"{p}attn.{n}.weight" for n in ("wq", "wk", "wv", "wo", "gate")}
            names |= {f"{p}attn.qknorm.qnorm.scale", f"{p}attn.qknorm.knorm.scale",
                      f"{p}prenorm.scale", f"{p}postnorm.scale"}
            names |= {f"{p}mlp.{n}.weight" for n in ("gate", "up", "down")}
            return names | ({f"{p}mod.lin"} if modulated else set())
        for i in blocks(sd, "transformer_blocks"):
            out |= block(f"blocks.{i}.", True)
        for kind in ("layerwise_blocks", "refiner_blocks"):
            for i in blocks(sd, f"text_fusion.{kind}"):
                out |= block(f"txtfusion.{kind}.{i}.", False)
        out |= {f"{n}.{e}" for n in ("first", "tmlp.0", "tmlp.2", "tproj.1", "txtmlp.1",
                                     "txtmlp.3", "last.linear") for e in wb}
        out |= {"txtfusion.projector.weight", "txtmlp.0.scale", "last.norm.scale",
                "last.modulation.lin"}
    elif family == "qwen_image_21":
        # diffusers' convert_qwen_image21_transformer_checkpoint_to_diffusers: ComfyUI's
        # file has diffusers' names, each block's gate and up projections fused.
        for k in sd:
            out.add(re.sub(r"img_mlp\.(gate_layer|proj)\.", "img_mlp.gate_up.", k))
    return out


# diffusers' readers of those files, back to diffusers' names.
TO_DIFFUSERS = {
    "qwen_image": lambda sd: sd,
    "flux2_klein": sfu.convert_flux2_transformer_checkpoint_to_diffusers,
    "flux2_dev": sfu.convert_flux2_transformer_checkpoint_to_diffusers,
    "z_image": sfu.convert_z_image_transformer_checkpoint_to_diffusers,
    "wan": sfu.convert_wan_transformer_to_diffusers,
    "krea2": sfu.convert_krea2_transformer_checkpoint_to_diffusers,
    "qwen_image_21": sfu.convert_qwen_image21_transformer_checkpoint_to_diffusers,
}
# The reference trainer's names: diffusers' where its model class loads diffusers' files as
# they are, the original ones where it loads the original files (Wan, Krea 2); none for a
# model it does not have.
REFERENCE_TO_DIFFUSERS = {
    "qwen_image": lambda sd: sd, "flux2_klein": lambda sd: sd, "flux2_dev": lambda sd: sd,
    "z_image": lambda sd: sd, "wan": sfu.convert_wan_transformer_to_diffusers,
    "krea2": sfu.convert_krea2_transformer_checkpoint_to_diffusers,
}
FAMILIES = list(TO_DIFFUSERS)


def assert_loads_back_bit_exact(model, state: dict) -> None:
    fresh = type(model).from_config(model.config)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    want = model.state_dict()
    for key, value in fresh.state_dict().items():
        assert value.dtype == want[key].dtype and torch.equal(value, want[key]), key


# ------------------------------------------------------------------------------------------
# The tests
# ------------------------------------------------------------------------------------------
def test_the_streaming_writer_writes_what_safetensors_writes(tmp_path):
    tensors = {"b.weight": torch.randn(3, 4), "a.scale": torch.randn(5).to(torch.bfloat16),
               "c.ids": torch.arange(7), "d.half": torch.randn(2, 2, 2).half(),
               "e.scalar": torch.tensor(2.5)}
    for meta in (None, {"format": "pt"}):
        save_file(tensors, str(tmp_path / "theirs.safetensors"), metadata=meta)
        full_export.save_tensors_streaming(tensors, tmp_path / "mine.safetensors", meta)
        assert ((tmp_path / "mine.safetensors").read_bytes()
                == (tmp_path / "theirs.safetensors").read_bytes())


@pytest.mark.parametrize("family", FAMILIES)
def test_comfyui_export_has_comfyuis_keys_and_round_trips_bit_exactly(tmp_path, family):
    model, folder = saved(tmp_path, family)
    out = full_export.export_full(folder, "comfyui", log=lambda m: None, chunk=100)
    assert out == folder.parent / "export" / "step-3.comfyui.safetensors"
    state = load_file(str(out))
    assert set(state) == comfyui_keys(family, model)
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert meta["zerolora_format"] == "comfyui" and meta["model_family"] == family
    assert_loads_back_bit_exact(model, TO_DIFFUSERS[family](dict(state)))


@pytest.mark.parametrize("family", list(REFERENCE_TO_DIFFUSERS))
def test_reference_export_is_the_reference_step_file_and_loads_back(tmp_path, family):
    model, folder = saved(tmp_path, family)
    out = full_export.export_full(folder, "reference", log=lambda m: None)
    assert out.name == "step-3.safetensors"  # the reference's own checkpoint name
    assert_loads_back_bit_exact(model, REFERENCE_TO_DIFFUSERS[family](load_file(str(out))))


def test_fused_weights_split_back_into_their_parts(tmp_path):
    model, folder = saved(tmp_path, "flux2_klein", torch.bfloat16)
    state = load_file(str(full_export.export_full(folder, "comfyui", log=lambda m: None)))
    want = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    q, k, v = state["double_blocks.1.txt_attn.qkv.weight"].chunk(3)
    p = "transformer_blocks.1.attn."
    assert state["double_blocks.1.txt_attn.qkv.weight"].dtype == torch.bfloat16
    assert torch.equal(q, want[p + "add_q_proj.weight"])
    assert torch.equal(k, want[p + "add_k_proj.weight"])
    assert torch.equal(v, want[p + "add_v_proj.weight"])
    shift, scale = state["final_layer.adaLN_modulation.1.weight"].chunk(2)
    assert torch.equal(torch.cat([scale, shift]), want["norm_out.linear.weight"])


def test_a_reference_file_gives_the_same_output(tmp_path):
    """FLUX.2 [klein]: the model loaded from the reference file predicts what the model
    that was saved predicts (through the family's flow prediction)."""
    from backend.families.flux2_klein.adapter import FLOW

    model, folder = saved(tmp_path, "flux2_klein")
    out = full_export.export_full(folder, "reference", log=lambda m: None)
    again = type(model).from_config(model.config)
    again.load_state_dict(load_file(str(out)))
    g = torch.Generator().manual_seed(0)
    latents, emb = torch.randn(1, 16, 4, 4, generator=g), torch.randn(1, 8, 48, generator=g)
    with torch.no_grad():
        a = FLOW.predict(model, latents, torch.tensor(0.5), emb)
        b = FLOW.predict(again, latents, torch.tensor(0.5), emb)
    assert torch.equal(a, b)


def test_a_tensor_without_a_comfyui_name_is_refused_and_named(tmp_path):
    model, folder = saved(tmp_path, "qwen_image")
    shard = sorted(folder.glob("*-00001-of-*.safetensors"))[0]
    tensors = load_file(str(shard))
    tensors["extra_head.weight"] = torch.ones(2, 2)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    index = json.loads((folder / full.INDEX_NAME).read_text())
    index["weight_map"]["extra_head.weight"] = shard.name
    (folder / full.INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(FullExportError) as e:
        full_export.export_full(folder, "comfyui", log=lambda m: None)
    (problem,) = e.value.problems
    assert problem.code == "fullexport.unnamed" and "extra_head.weight" in str(problem)
    assert "extra_head.weight" in e.value.message.text("zh")
    assert not (folder.parent / "export").exists()


def test_a_format_the_family_has_no_names_for_is_refused(tmp_path):
    _, folder = saved(tmp_path, "qwen_image_21")
    with pytest.raises(FullExportError) as e:
        full_export.export_full(folder, "reference", log=lambda m: None)
    assert [p.code for p in e.value.problems] == ["fullexport.no_names"]
    assert "comfyui" in str(e.value)


def test_no_room_on_the_disk_is_refused_before_writing(tmp_path, monkeypatch):
    _, folder = saved(tmp_path, "flux2_klein")
    usage = full_export.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(full_export.shutil, "disk_usage",
                        lambda p: usage._replace(free=1000))
    with pytest.raises(FullExportError) as e:
        full_export.export_full(folder, "comfyui", log=lambda m: None)
    assert [p.code for p in e.value.problems] == ["fullexport.no_space"]
    assert not (folder.parent / "export").exists()


def test_bad_arguments_are_all_named_at_once(tmp_path):
    with pytest.raises(FullExportError) as e:
        full_export.export_full(tmp_path / "nothing", "onnx", tmp_path / "x.bin",
                                family="nope", log=lambda m: None)
    assert {p.code for p in e.value.problems} == {"fullexport.format", "fullexport.out_suffix",
                                                   "fullexport.family"}


def test_cli_writes_the_file_and_refuses_with_its_exit_code(tmp_path, capsys):
    _, folder = saved(tmp_path, "z_image")
    out = tmp_path / "z.safetensors"
    assert full_export.main([str(folder), "--format", "comfyui", "--out", str(out)]) == 0
    assert "layers.0.attention.qkv.weight" in load_file(str(out))
    assert full_export.main([str(tmp_path / "none"), "--format", "comfyui"]) == 2
    assert "fullexport" not in capsys.readouterr().err  # English, not codes


def test_the_lora_export_cli_hands_a_checkpoint_folder_to_the_full_export(tmp_path):
    from backend.models import export

    _, folder = saved(tmp_path, "qwen_image")
    assert export.main([str(folder), "--format", "reference"]) == 0
    assert (folder.parent / "export" / "step-3.safetensors").is_file()
