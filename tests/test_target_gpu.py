"""The Training tab's estimate for a chosen GPU on a host without one: every single-GPU
method side by side, the fastest that fits, and the field changes one click applies."""
from __future__ import annotations

from backend.config.presets import load_preset


def test_a_24_gb_card_gets_layer_offload_with_nf4_and_an_80_gb_card_plain_bf16():
    from webui.tabs.training import gb_text, target_markdown

    cfg = load_preset("qwen_image_low_vram")  # ZeRO-3 offload; no dataset chosen
    text, changes = target_markdown(cfg, 24, 25)
    assert "one 24 GB GPU" in text
    for method in ("bf16 base on the GPU", "nf4 base (bitsandbytes)",
                   "layer offload, bf16 base", "DeepSpeed ZeRO-3"):
        assert method in text, method
    assert "Fastest that fits: **layer offload, nf4 base (bitsandbytes)**" in text
    assert "0.0 GB" not in text
    assert changes["zero_stage"] == 0 and changes["enable_model_cpu_offload"] is True
    assert changes["quant_options"].endswith(":bitsandbytes_nf4")
    # Applied, the form already uses it: nothing left to change.
    done, again = target_markdown(cfg.model_copy(update=changes), 24, 25)
    assert again == {} and "The form already uses it." in done
    text, changes = target_markdown(cfg, 80, 25)
    assert "Fastest that fits: **bf16 base on the GPU**" in text
    assert changes == {"zero_stage": 0, "offload_param_device": "none",
                       "offload_optimizer_device": "none"}
    assert gb_text(0.02e9) == "under 0.1 GB" and gb_text(25.276e9) == "25 GB"
