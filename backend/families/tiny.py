"""Tiny real-architecture pipelines of any family, built locally in seconds.

Each family's ``build_tiny`` writes its real classes at toy sizes with random weights from
fixed seeds, in the hub layout, so the stages, tests and the demo load it like a real
model. Random weights render noise.

Run:
    python -m backend.families.tiny OUT_DIR [--family NAME] [--variant NAME] [--seed 0]
"""
from __future__ import annotations

import argparse

from backend.families import default_family, family_names, family_spec, get_family


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.tiny",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="folder to write the pipeline to (hub layout)")
    parser.add_argument("--family", default=default_family(), choices=family_names(),
                        help="model family (default: %(default)s)")
    parser.add_argument("--variant", default=None,
                        help="one of the family's variants (default: the family's model)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args(argv)
    spec = family_spec(args.family)
    if args.variant is not None and spec.variant(args.variant) is None:
        parser.error(f"--variant: {args.family} has no variant {args.variant!r} (allowed "
                     f"{' | '.join(v.name for v in spec.variants)})")
    print(get_family(args.family).build_tiny(args.out_dir, seed=args.seed,
                                             variant=args.variant))


if __name__ == "__main__":
    main()
