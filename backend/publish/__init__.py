"""Publish a finished run's LoRA (or a full fine-tune's checkpoint) to the Hugging Face Hub
or ModelScope, with a model card built from the run (``card.py``), nothing of the server's
in any byte sent (``scrub.py``), through ``huggingface_hub.HfApi`` or ModelScope's
``HubApi`` (``hub.py``).

Run (the token comes from ``HF_TOKEN`` or ``huggingface-cli login``, or
``MODELSCOPE_API_TOKEN``; never a flag):

    python -m backend.publish runs/<id> --repo you/my-lora --dry-run    # the card and files
    python -m backend.publish runs/<id> --repo you/my-lora --private \\
        --formats diffusers comfyui --checkpoint step-1000.safetensors
    python -m backend.publish runs/<id> --repo you/my-lora --destination modelscope
    python -m backend.publish runs/<full-run> --repo you/my-model --checkpoint step-1000 \\
        --formats diffusers                                # a full fine-tune's checkpoint

``HF_ENDPOINT`` / ``MODELSCOPE_ENDPOINT`` point it at another hub (the tests' local
servers); ``HF_HUB_OFFLINE=1`` refuses a Hugging Face upload before anything is staged or
sent.

The page (the Runs tab's Publish, ``webui/tabs/publish.py``) and the API (``/publish_run``)
call it through ``webui/publishing.py``, which adds the hosting rules (whose run, whose
token).
"""
