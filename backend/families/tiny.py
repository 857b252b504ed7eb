"""Tiny real-architecture pipelines of any family, built locally in seconds.

Each family's ``build_tiny`` writes its real classes at toy sizes with random weights from
fixed seeds, in the hub layout, so the stages, tests and the demo load it like a real
model. Random weights render noise.

Run:
    python -m backend.families.tiny OUT_DIR [--family NAME] [--seed 0]
"""
from __future__ import annotations

import argparse

from backend.families import default_family, family_names, get_family


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--family", default=default_family(), choices=family_names(),
                        help="model family (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    print(get_family(args.family).build_tiny(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
