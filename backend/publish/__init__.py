"""Publish a finished run's LoRA to the Hugging Face Hub, with a model card built from the
run (``card.py``), nothing of the server's in any byte sent (``scrub.py``), through
``huggingface_hub.HfApi`` (``hub.py``).

Run (the token comes from ``HF_TOKEN`` or ``huggingface-cli login``, never a flag):

    python -m backend.publish runs/<id> --repo you/my-lora --dry-run    # the card and files
    python -m backend.publish runs/<id> --repo you/my-lora --private \\
        --formats diffusers comfyui --checkpoint step-1000.safetensors

``HF_ENDPOINT`` points it at another Hub (the tests' local server); ``HF_HUB_OFFLINE=1``
refuses before anything is staged or sent.

The page (the Runs tab's Publish, ``webui/tabs/publish.py``) and the API (``/publish_run``)
call it through ``webui/publishing.py``, which adds the hosting rules (whose run, whose
token).
"""
