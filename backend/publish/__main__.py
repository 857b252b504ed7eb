"""``python -m backend.publish RUN_FOLDER --repo owner/name [--destination modelscope]``: the
CLI of ``hub.publish`` (see ``backend/publish/__init__.py``). Exit codes as every stage's
(``backend.core.exits``): 0 published (or previewed), 2 refused or failed with the reason on
stderr."""
from __future__ import annotations

import argparse
import sys

from backend.config.errors import ConfigError
from backend.core import exits
from backend.core.diskspace import size_text
from backend.core.messages import Msg
from backend.publish.hub import (DEFAULT_DESTINATION, DESTINATIONS, FORMATS, PublishError,
                                 preview, publish, repo_url)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m backend.publish",
        description="Publish a finished run's LoRA (or a full fine-tune's checkpoint) to the "
                    "Hugging Face Hub or ModelScope with a model card. The token comes from "
                    "HF_TOKEN (or huggingface-cli login), or MODELSCOPE_API_TOKEN.")
    p.add_argument("run_folder", help="the run's folder (runs/<id>)")
    p.add_argument("--repo", required=True, help="the repository, owner/name")
    p.add_argument("--destination", choices=DESTINATIONS, default=DEFAULT_DESTINATION,
                   help="the hub: huggingface (HF_ENDPOINT) or modelscope "
                        "(MODELSCOPE_ENDPOINT); default %(default)s")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                   help="the formats to publish (default: all): a LoRA's key layouts, or a "
                        "full checkpoint's diffusers folder / ComfyUI file / reference file")
    p.add_argument("--checkpoint", default=None,
                   help="the checkpoint's name (default: the latest), e.g. "
                        "step-1000.safetensors, or a full fine-tune's step-1000")
    p.add_argument("--existing", action="store_true",
                   help="add a commit to a repository that exists already (yours)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the card and the files; send nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.dry_run:
            staged = preview(args.run_folder, args.repo, args.formats, args.checkpoint,
                             destination=args.destination)
            print(staged.card)
            for path, size in staged.files:
                print(f"{size_text(size):>12}  {path}")
            print(Msg("publish.dry_run", url=repo_url(staged.repo_id, args.destination)))
            return exits.OK
        publish(args.run_folder, args.repo, private=args.private, formats=args.formats,
                checkpoint=args.checkpoint, existing=args.existing,
                destination=args.destination, say=lambda m: print(m, flush=True))
    except PublishError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return exits.REFUSED
    except ConfigError as e:  # the run's settings file cannot be read
        print(f"error: {e}", file=sys.stderr)
        return exits.REFUSED
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
