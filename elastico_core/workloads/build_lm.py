"""``python -m elastico_core.workloads.build_lm --out DIR``: build the CPU engine's language model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elastico_core.workloads.entry import guarded
from elastico_core.workloads.lm.build import build_lm
from elastico_core.workloads.runtime import set_threads
from elastico_core.workloads.scale import parse_scale


@guarded
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.build_lm", description=__doc__)
    p.add_argument("--out", required=True, help="folder to write model.pt and lm.json into")
    p.add_argument("--scale", default="tiny", help="tiny | small | full")
    p.add_argument("--steps", type=int, help="training steps (default per scale)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int)
    args = p.parse_args(argv)
    set_threads(args.threads)
    r = build_lm(Path(args.out), parse_scale(args.scale), steps=args.steps, seed=args.seed)
    print(f"built {r.folder}: {r.params:,} parameters, {r.steps} steps, loss {r.loss:.3f} nats/byte, {r.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
