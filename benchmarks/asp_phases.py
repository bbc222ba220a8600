"""How an asynchronous policy's simulated throughput depends on the noise that takes its workers out of step.

    python benchmarks/asp_phases.py                              # both validation clusters
    python benchmarks/asp_phases.py CONFIG [CONFIG ...] --seeds 5 --iterations 30

For each config's asynchronous policies (ASP, SSP) and each compute jitter (coefficient of
variation), the minimum, median and maximum steady throughput over seeded simulations
(`sim.experiments.ensemble.decorrelated`, the first 3 iterations dropped). Jitter 0 is lockstep, which is
the same on every seed. `syncsim validate` predicts with the median at `sim.experiments.ensemble.JITTER`;
this table shows whether that choice matters (docs/validation.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.config import load_config  # noqa: E402
from sim.experiments.ensemble import asynchronous_policies, decorrelated  # noqa: E402

JITTERS = (0.0, 0.3, 1.0, 2.0, 4.0, 8.0)
DEFAULT_CONFIGS = ("configs/validate_2x2.yaml", "configs/validate_4x2.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=[str(ROOT / c) for c in DEFAULT_CONFIGS])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, help="override the config's iterations")
    args = parser.parse_args()
    print(f"{'config':<28}{'policy':<8}{'jitter':>7}{'min':>9}{'median':>9}{'max':>9}  samples/s")
    for path in args.configs:
        config = load_config(Path(path))
        if args.iterations:
            config = config.model_copy(update={"iterations": args.iterations})
        policies = asynchronous_policies(config)
        for jitter in JITTERS:
            runs = decorrelated(config, policies, seeds=args.seeds, jitter=jitter, warmup=3)
            for policy, df in runs.groupby("policy", sort=False):
                t = df["throughput_samples_s"]
                print(
                    f"{Path(path).name:<28}{policy:<8}{jitter:>7.1f}{t.min():>9.1f}{t.median():>9.1f}{t.max():>9.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
