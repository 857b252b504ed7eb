"""Publishing a run's LoRA or full checkpoint (backend/publish) with huggingface_hub's real
client and ModelScope's (``modelscope.hub.api.HubApi``).

No hub is reachable from the test machines, so local HTTP servers that speak each hub's
endpoints stand in for them: the Hugging Face Hub's (``tests/harness/hub_server.py``:
create a repository, preupload, commit, validate a model card) as ``HF_ENDPOINT``,
ModelScope's (``tests/harness/modelscope_server.py``: create a model, the LFS batch, blob
uploads, commit) as ``MODELSCOPE_ENDPOINT``. The run is a finished run's
folder as the stages leave it (``backend/core/rundir.py``'s names): its settings, progress
events, a real LoRA of the tiny model with the metadata training writes (the base model's
server path among it), the training arguments, samples with their index, logs. The server
gets exactly the chosen files; the card validates with ``ModelCard.validate``; no byte that
arrives holds the run folder's path, the workspace, the dataset's, the models folder's, the
home folder's or the token (``tests/harness/published.py``'s shared checks, on each
server's ``arrived()``); each refusal names why. A full fine-tune's run is the same run
with its checkpoint a folder written by ``backend.models.full.save_component`` (the tiny
transformer, no training).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.core.messages import Msg
from backend.core.rundir import RunDir
from backend.publish import hub as pub
from backend.publish.__main__ import main as cli
from tests.harness.hub_server import HubServer
from tests.harness.loras import RANK
from tests.harness.modelscope_server import ModelScopeServer
from tests.harness.published import (PROMPTS, assert_nothing_of_the_server, forbidden,
                                     write_finished_run)

TOKEN = "hf_" + "TestTokenNeverSent0123456789abcdef"
MS_TOKEN = "ms-" + "TestTokenNeverSent-0123456789abcdef"
USER = "alice"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, tiny_model_dir, models_root, demo_dataset) -> Path:
    """A finished run of the tiny model, written as the stages write it, the token planted
    in its resume state and a log (files that must never be sent)."""
    workspace = tmp_path_factory.mktemp("workspace")
    rd = RunDir.new(workspace, "20260101-120000-abc123")
    return write_finished_run(rd, tiny_model_dir, models_root, demo_dataset, planted=TOKEN)


@pytest.fixture
def hub(monkeypatch):
    """The local Hub, as ``HF_ENDPOINT`` (and huggingface_hub's constant, read at import)."""
    from huggingface_hub import constants

    with HubServer(TOKEN, USER) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def publish(run_folder, repo=f"{USER}/zlr-style", **kw):
    kw.setdefault("token", TOKEN)
    kw.setdefault("formats", ["diffusers", "comfyui"])
    return pub.publish(run_folder, repo, **kw)


# ---------------------------------------------------------------------------- publishing
def test_the_chosen_files_arrive_and_nothing_of_the_server(hub, run_folder, models_root,
                                                          demo_dataset):
    said = []
    done = publish(run_folder, private=True, say=said.append)
    repo = hub.repos[f"{USER}/zlr-style"]
    assert sorted(repo) == ["README.md", "images/p00-base.png", "images/p00-lora.png",
                            "images/p01-base.png", "images/p01-lora.png",
                            "pytorch_lora_weights.safetensors",
                            "zlr-style_comfyui.safetensors"]
    assert hub.private[f"{USER}/zlr-style"] is True
    assert done.url == f"{hub.url}/{USER}/zlr-style"
    assert sorted(p for p, _ in done.files) == sorted(repo)
    assert [m.code for m in said] == ["publish.creating", "publish.uploading",
                                      "publish.published"]
    # the LoRA images are the published checkpoint's (step-2: red), not step-1's
    from PIL import Image
    import io
    assert Image.open(io.BytesIO(repo["images/p00-lora.png"])).getpixel((0, 0)) == (200, 40, 40)

    assert_nothing_of_the_server(hub.arrived(), forbidden(run_folder, models_root,
                                                          demo_dataset, TOKEN))

    # the weights load, in their formats, without the server's paths in their metadata
    from safetensors import safe_open
    from safetensors.torch import load
    for name, prefix in (("pytorch_lora_weights.safetensors", "transformer."),
                         ("zlr-style_comfyui.safetensors", "diffusion_model.")):
        tensors = load(repo[name])
        assert tensors and all(k.startswith(prefix) for k in tensors), name
    path = run_folder.parent / "check.safetensors"
    path.write_bytes(repo["pytorch_lora_weights.safetensors"])
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    path.unlink()
    assert "base_model_path" not in meta and "zerolora_verified_against" not in meta
    assert meta["rank"] == str(RANK)


def test_the_card_validates_and_says_what_the_run_did(hub, run_folder):
    from huggingface_hub import ModelCard

    publish(run_folder, formats=["diffusers", "comfyui", "reference"])
    repo = hub.repos[f"{USER}/zlr-style"]
    card = ModelCard(repo["README.md"].decode())
    card.validate()  # against the local Hub's /api/validate-yaml
    data = card.data.to_dict()
    assert data["base_model"] == "Qwen/Qwen-Image"
    assert data["base_model_relation"] == "adapter"
    assert data["library_name"] == "diffusers"
    assert data["instance_prompt"] == "zlr style"
    assert "lora" in data["tags"]
    assert [w["text"] for w in data["widget"]] == PROMPTS
    assert all(w["output"]["url"] in repo for w in data["widget"])
    body = card.text
    for image in (p for p in repo if p.startswith("images/")):
        assert f"]({image})" in body
    assert "load_lora_weights('alice/zlr-style', weight_name='pytorch_lora_weights.safetensors')" \
        in body
    assert "zlr-style_comfyui.safetensors" in body and "pipe.load_lora(pipe.dit" in body
    assert "| steps | 2 |" in body and "| dataset size | 4 items |" in body
    assert "| training time | 1 min 05 s |" in body
    # the settings say what changed, without the options that name places on the server
    settings = body.split("```yaml", 1)[1].split("```", 1)[0]
    assert "learning_rate: 0.0002" in settings and "trigger_word: zlr style" in settings
    for name in ("models_dir", "dataset_base_path", "output_path", "progress_file"):
        assert f"{name}:" not in settings and f"`{name}`" in body

    # the local Hub's check can fail: a card it refuses
    bad = ModelCard(repo["README.md"].decode().replace("base_model_relation: adapter",
                                                       "base_model_relation: cousin"))
    with pytest.raises(ValueError, match="base_model_relation"):
        bad.validate()


def test_preview_and_dry_run_send_nothing(hub, run_folder, capsys):
    staged = pub.preview(run_folder, f"{USER}/zlr-style", ["reference"], "step-1")
    assert [p for p, _ in staged.files] == ["README.md", "images/p00-base.png",
                                            "images/p00-lora.png", "images/p01-base.png",
                                            "images/p01-lora.png", "zlr-style.safetensors"]
    assert staged.checkpoint == "step-1.safetensors" and "`step-1.safetensors`" in staged.card
    assert cli([str(run_folder), "--repo", f"{USER}/zlr-style", "--formats", "comfyui",
                "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "base_model_relation: adapter" in out and "zlr-style_comfyui.safetensors" in out
    assert "Nothing was sent" in out
    assert hub.requests == []


def test_cli_publishes_with_the_environment_s_token(hub, run_folder, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli([str(run_folder), "--repo", f"{USER}/from-cli", "--formats", "reference"]) == 0
    assert [p for p in hub.repos[f"{USER}/from-cli"] if p.endswith(".safetensors")] == [
        "from-cli.safetensors"]
    assert "✓ Published" in capsys.readouterr().out


# ---------------------------------------------------------------------------- refusals
def _refusal(call) -> Msg:
    with pytest.raises(pub.PublishError) as e:
        call()
    assert isinstance(e.value.message, Msg)
    return e.value.message


@pytest.mark.parametrize("repo", ["no-owner", "alice/", "alice/bad name", "alice/a..b",
                                  "alice/x.git", "alice/-x", "a/b/c", "alice/" + "x" * 97])
def test_a_bad_repository_name_is_refused_before_anything(hub, run_folder, repo):
    assert _refusal(lambda: publish(run_folder, repo)).code == "publish.repo_invalid"
    assert hub.requests == []


def test_the_hub_s_no_says_why(hub, run_folder):
    # 401: a token the Hub does not know
    m = _refusal(lambda: publish(run_folder, token="hf_wrongwrongwrongwrongwrong"))
    assert m.code == "publish.unauthorized"
    # 403: an owner the token may not write to
    m = _refusal(lambda: publish(run_folder, "bob/zlr-style"))
    assert m.code == "publish.forbidden" and m.params["repo"] == "bob/zlr-style"
    # 409: the name is taken; adding to it (a retry after a failed upload) works
    publish(run_folder)
    m = _refusal(lambda: publish(run_folder))
    assert m.code == "publish.name_taken"
    hub.fail["commit"] = 403
    assert _refusal(lambda: publish(run_folder, existing=True)).code == "publish.forbidden"
    del hub.fail["commit"]
    assert publish(run_folder, existing=True).url.endswith("/alice/zlr-style")
    # the Hub's other answers name their status
    hub.fail["create"] = 500
    m = _refusal(lambda: publish(run_folder, f"{USER}/other"))
    assert m.code == "publish.http_failed" and m.params["status"] == 500
    for m in (m,):
        assert TOKEN not in m and TOKEN not in m.text("zh")


def test_network_offline_and_no_token_refuse(hub, run_folder, monkeypatch):
    m = _refusal(lambda: publish(run_folder, endpoint="http://127.0.0.1:9"))
    assert m.code == "publish.network" and "127.0.0.1:9" in m
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    assert _refusal(lambda: publish(run_folder, token=None)).code == "publish.no_token"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = _refusal(lambda: publish(run_folder))
    assert m.code == "publish.offline" and "HF_HUB_OFFLINE" in m.text("zh")
    assert hub.requests == []


def test_a_run_without_its_files_or_checkpoint_is_refused(run_folder, tmp_path):
    m = _refusal(lambda: pub.preview(tmp_path, f"{USER}/x"))
    assert m.code == "publish.not_a_run"
    m = _refusal(lambda: pub.preview(run_folder, f"{USER}/x", checkpoint="step-9"))
    assert m.code == "publish.unknown_checkpoint" and "step-2.safetensors" in m
    m = _refusal(lambda: pub.preview(run_folder, f"{USER}/x", formats=["safetensors"]))
    assert m.code == "publish.unknown_format"


def test_a_checkpoint_linked_out_of_the_run_is_refused(run_folder, tmp_path):
    """A link in output/ would send a file of the server's that is not the run's."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_folder, copy)
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copyfile(copy / "output" / "step-2.safetensors", outside)
    (copy / "output" / "step-2.safetensors").unlink()
    (copy / "output" / "step-2.safetensors").symlink_to(outside)
    m = _refusal(lambda: pub.preview(copy, f"{USER}/x", checkpoint="step-2"))
    assert m.code == "publish.checkpoint_outside" and m.params["name"] == "step-2.safetensors"
    assert pub.preview(copy, f"{USER}/x", ["reference"], "step-1").checkpoint == \
        "step-1.safetensors"


def test_a_server_path_left_in_a_file_stops_the_upload(hub, run_folder, monkeypatch):
    """The last guard reads every staged byte: a path that got past the others (here a
    sample prompt naming the dataset's folder) stops everything before a request."""
    from backend.publish import card as cards

    real = cards.facts

    def leaky(rd, checkpoint):
        f = real(rd, checkpoint)
        f.rows[0].prompt = f"look at {f.settings['dataset_base_path']}/red.png"
        return f

    monkeypatch.setattr(cards, "facts", leaky)
    m = _refusal(lambda: publish(run_folder))
    assert m.code == "publish.path_left" and m.params["file"] == "README.md"
    assert m.params["what"].code == "publish.what_option"
    assert hub.requests == []


# ---------------------------------------------------------------------------- the parts
def test_the_license_comes_from_the_base_model_s_own_card(tmp_path):
    from backend.publish.card import base_license

    (tmp_path / "org" / "base").mkdir(parents=True)
    (tmp_path / "org" / "base" / "README.md").write_text(
        "---\nlicense: apache-2.0\n---\n# base\n", encoding="utf-8")
    assert base_license({"models_dir": str(tmp_path)}, "org/base") == "apache-2.0"
    assert base_license({"models_dir": str(tmp_path)}, "org/other") is None  # not known


def test_settings_and_metadata_lose_every_server_path(tmp_path):
    from safetensors.torch import load, save
    import torch

    from backend.publish.scrub import Secret, clean_safetensors, public_settings

    secret = [Secret("/srv/zl/workspace", Msg("publish.what_run_folder"))]
    kept, removed = public_settings({
        "learning_rate": 1e-4, "models_dir": "/models", "sample_prompts": ["a cat"],
        "model_id_with_origin_paths": "org/m:transformer/*.safetensors,/srv/x/vae.pt",
        "captioner_path": "~/vl", "sample_negative_prompt": "see /srv/zl/workspace/x",
        "run_name": "hf_" + "a" * 30}, secret)
    assert kept == {"learning_rate": 1e-4, "sample_prompts": ["a cat"]}
    assert sorted(removed) == ["captioner_path", "model_id_with_origin_paths", "models_dir",
                               "run_name", "sample_negative_prompt"]
    src, dst = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    src.write_bytes(save({"w": torch.arange(6.0).reshape(2, 3)}, metadata={
        "rank": "4", "base_model_path": "/srv/models/t", "note": "from C:\\data\\x",
        "zerolora_verified_against": "the published module names",
        "src": "built in /srv/zl/workspace/runs/1"}))
    assert clean_safetensors(src, dst, secret) == ["base_model_path", "note", "src"]
    assert torch.equal(load(dst.read_bytes())["w"], torch.arange(6.0).reshape(2, 3))
    from safetensors import safe_open
    with safe_open(str(dst), "pt") as f:
        assert f.metadata() == {"rank": "4",
                                "zerolora_verified_against": "the published module names"}


# ---------------------------------------------------------------------------- ModelScope
@pytest.fixture
def ms(monkeypatch, tmp_path):
    """The local ModelScope, as ``MODELSCOPE_ENDPOINT``; its client's own folders in the
    test's, one retry of a failed connection."""
    with ModelScopeServer(MS_TOKEN, USER) as server:
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", server.url)
        monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "modelscope-home"))
        monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "modelscope-cache"))
        monkeypatch.delenv("MODELSCOPE_API_TOKEN", raising=False)
        monkeypatch.setattr(pub, "MS_RETRIES", 1)
        yield server


def ms_publish(run_folder, repo=f"{USER}/zlr-style", **kw):
    kw.setdefault("token", MS_TOKEN)
    kw.setdefault("formats", ["diffusers", "comfyui"])
    return pub.publish(run_folder, repo, destination="modelscope", **kw)


def front_matter(card: bytes | str) -> tuple[dict, str]:
    import yaml

    text = card.decode() if isinstance(card, bytes) else card
    _, head, body = text.split("---\n", 2)
    return yaml.safe_load(head), body


def test_modelscope_gets_the_files_and_its_own_card_and_nothing_of_the_server(
        ms, run_folder, models_root, demo_dataset):
    said = []
    done = ms_publish(run_folder, private=True, say=said.append)
    repo = ms.repos[f"{USER}/zlr-style"]
    assert sorted(repo) == ["README.md", "images/p00-base.png", "images/p00-lora.png",
                            "images/p01-base.png", "images/p01-lora.png",
                            "pytorch_lora_weights.safetensors",
                            "zlr-style_comfyui.safetensors"]
    assert ms.private[f"{USER}/zlr-style"] is True
    assert done.url == f"{ms.url}/models/{USER}/zlr-style"
    assert sorted(p for p, _ in done.files) == sorted(repo)
    # the weights went as LFS blobs, each checked against its sha256 by the server
    assert sum(1 for m, p, _ in ms.requests if m == "PUT") == 2
    from safetensors.torch import load
    assert all(k.startswith("transformer.") for k in load(repo["pytorch_lora_weights.safetensors"]))
    codes = [m.code for m in said]
    assert codes[:2] == ["publish.creating", "publish.uploading"]
    assert codes[-1] == "publish.published" and "publish.sent" in codes
    last = [m for m in said if m.code == "publish.sent"][-1]
    assert last.params["percent"] == 100

    data, body = front_matter(repo["README.md"])
    assert data["frameworks"] == ["Pytorch"] and data["tasks"] == ["text-to-image-synthesis"]
    assert data["base_model"] == ["Qwen/Qwen-Image"] and data["base_model_relation"] == "adapter"
    assert "lora" in data["tags"] and "widget" not in data
    assert "https://modelscope.cn/models/Qwen/Qwen-Image" in body
    assert "snapshot_download('alice/zlr-style')" in body and "huggingface" not in body
    assert "weight_name='pytorch_lora_weights.safetensors'" in body

    assert_nothing_of_the_server(ms.arrived(), forbidden(run_folder, models_root,
                                                         demo_dataset, MS_TOKEN))


def test_modelscope_s_no_says_why_and_a_retry_adds_to_the_repository(ms, run_folder,
                                                                      monkeypatch):
    m = _refusal(lambda: ms_publish(run_folder, token="ms-wrongwrongwrongwrongwrong"))
    assert m.code == "publish.ms_unauthorized"
    m = _refusal(lambda: ms_publish(run_folder, "bob/zlr-style"))
    assert m.code == "publish.ms_forbidden" and m.params["owner"] == "bob"
    ms_publish(run_folder, formats=["reference"])
    assert _refusal(lambda: ms_publish(run_folder)).code == "publish.ms_name_taken"
    # the commit refused: the status of the failed batch, not the upload's summary
    ms.fail["commit"] = 403
    assert _refusal(lambda: ms_publish(run_folder, existing=True)).code == \
        "publish.ms_forbidden"
    del ms.fail["commit"]
    done = ms_publish(run_folder, existing=True)  # the retry adds to the repository
    assert done.url.endswith("/models/alice/zlr-style")
    assert {"zlr-style.safetensors", "pytorch_lora_weights.safetensors"} <= \
        set(ms.repos[f"{USER}/zlr-style"])
    ms.fail["create"] = 422
    m = _refusal(lambda: ms_publish(run_folder, f"{USER}/other"))
    assert m.code == "publish.ms_http_failed" and m.params["status"] == 422
    assert MS_TOKEN not in m and MS_TOKEN not in m.text("zh")
    # the network, no token, the environment's token, a hub that is not one
    m = _refusal(lambda: ms_publish(run_folder, endpoint="http://127.0.0.1:9"))
    assert m.code == "publish.ms_network" and "127.0.0.1:9" in m
    assert _refusal(lambda: ms_publish(run_folder, token=None)).code == "publish.ms_no_token"
    monkeypatch.setenv("MODELSCOPE_API_TOKEN", MS_TOKEN)
    del ms.fail["create"]
    assert cli([str(run_folder), "--repo", f"{USER}/from-cli", "--destination", "modelscope",
                "--formats", "reference"]) == 0
    assert "from-cli.safetensors" in ms.repos[f"{USER}/from-cli"]
    m = _refusal(lambda: pub.preview(run_folder, f"{USER}/x", destination="gitee"))
    assert m.code == "publish.unknown_destination"


# ---------------------------------------------------------------------------- full checkpoints
@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_model_dir, models_root, demo_dataset) -> Path:
    """A finished full fine-tune of the tiny model: ``output/step-2/`` a real checkpoint
    folder (its record naming the base model's server path), the token planted."""
    workspace = tmp_path_factory.mktemp("full-workspace")
    rd = RunDir.new(workspace, "20260101-130000-f0f0f0")
    return write_finished_run(rd, tiny_model_dir, models_root, demo_dataset, planted=MS_TOKEN,
                              full=True)


def test_a_full_checkpoint_goes_to_modelscope_in_each_format_as_a_finetune(
        ms, full_run, models_root, demo_dataset, tmp_path):
    import torch
    from safetensors.torch import load, load_file

    from backend.models.full_export import export_full

    ms_publish(full_run, "alice/zlr-full", formats=["diffusers", "comfyui", "reference"],
               checkpoint="step-2")
    repo = ms.repos["alice/zlr-full"]
    src = full_run / "output" / "step-2"
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    assert len(shards) > 1
    assert sorted(repo) == sorted(
        ["README.md", "zlr-full_comfyui.safetensors", "zlr-full.safetensors",
         "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors.index.json"]
        + [f"transformer/{n}" for n in shards]
        + [f"images/p0{i}-{r}.png" for i in (0, 1) for r in ("base", "lora")])
    # the diffusers folder loads with from_pretrained and holds the checkpoint's weights
    folder = tmp_path / "got" / "transformer"
    folder.mkdir(parents=True)
    for path, data in repo.items():
        if path.startswith("transformer/"):
            (folder / path.split("/", 1)[1]).write_bytes(data)
    from diffusers import AutoModel
    got = AutoModel.from_pretrained(str(folder)).state_dict()
    want = {}
    for n in shards:
        want.update(load_file(str(src / n)))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    # the single files are what the Runs tab's download writes for the same checkpoint
    for fmt, name in (("comfyui", "zlr-full_comfyui.safetensors"),
                      ("reference", "zlr-full.safetensors")):
        ref = load_file(str(export_full(src, fmt, tmp_path / f"{fmt}.safetensors",
                                        log=lambda _: None)))
        sent = load(repo[name])
        assert set(sent) == set(ref) and all(torch.equal(sent[k], ref[k]) for k in ref), fmt

    data, body = front_matter(repo["README.md"])
    assert data["base_model_relation"] == "finetune" and data["base_model"] == ["Qwen/Qwen-Image"]
    assert "full-finetune" in data["tags"] and "lora" not in data["tags"]
    assert "A full fine-tune of [Qwen/Qwen-Image]" in body
    assert "AutoModel.from_pretrained(tuned, subfolder='transformer'" in body
    assert "LoRA rank" not in body and "`transformer/`" in body
    assert_nothing_of_the_server(ms.arrived(), forbidden(full_run, models_root, demo_dataset,
                                                         MS_TOKEN))
    # the checkpoint's own record (the base model's server path) stays behind
    assert not any(p.endswith("zerolora_checkpoint.json") for p in repo)


def test_a_full_checkpoint_s_card_validates_on_the_hub_and_space_is_checked(
        hub, full_run, monkeypatch):
    from huggingface_hub import ModelCard

    done = pub.publish(full_run, f"{USER}/zlr-full", token=TOKEN,
                       formats=["diffusers", "comfyui"])
    card = ModelCard(hub.repos[f"{USER}/zlr-full"]["README.md"].decode())
    card.validate()
    assert card.data.base_model_relation == "finetune"
    assert "ComfyUI/models/diffusion_models/" in card.text
    # a preview sizes the weights without writing them: the same files, about their sizes
    shown = dict(pub.preview(full_run, f"{USER}/zlr-full", ["diffusers", "comfyui"]).files)
    sent = dict(done.files)
    assert sorted(shown) == sorted(sent)
    for path, size in sent.items():
        if path.endswith(".safetensors"):
            assert abs(shown[path] - size) < 64 * 1024, path
    # too little room to stage the files: refused before a byte is written or sent
    n = len(hub.requests)
    free = type("Usage", (), {"free": 1_000})()
    monkeypatch.setattr(pub.shutil, "disk_usage", lambda path: free)
    m = _refusal(lambda: pub.publish(full_run, f"{USER}/zlr-full-2", token=TOKEN))
    assert m.code == "publish.no_space" and len(hub.requests) == n


def test_a_config_loses_the_entries_that_name_a_server_path(tmp_path):
    import json

    from backend.publish.scrub import Secret, clean_json

    src = tmp_path / "config.json"
    src.write_text(json.dumps({"_class_name": "Model", "num_layers": 2,
                               "_name_or_path": "/srv/models/base/transformer",
                               "extra": {"cache": "/srv/zl/workspace/x"}}))
    secret = [Secret("/srv/zl/workspace", Msg("publish.what_run_folder"))]
    assert clean_json(src, tmp_path / "out.json", secret) == ["_name_or_path", "extra"]
    assert json.loads((tmp_path / "out.json").read_text()) == {"_class_name": "Model",
                                                              "num_layers": 2}
