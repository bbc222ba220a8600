"""A real run of a config without a `numerics:` section: train the workload's own zoo model.

The simulator needs no model to train, so most configs have no `numerics:` section. The real
backend always trains one. When the section is missing (or disabled), it trains the workload's zoo
model as torch.nn on seeded synthetic data of the zoo's input shape, at the workload's batch size
per worker. This is a timing run: the loss is still logged, but the data are not a task worth
learning. Every process derives the same section from the same config, and the run's
`config.yaml` records it. Like every real run, it trains in the workload's `precision`
(real/precision.py) on each rank's device (real/backends.py).
"""

from __future__ import annotations

from sim.catalog.zoo import canonical_name
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
from sim.cluster.topology import build_cluster
from sim.config import Config, parse_config
from sim.config.schema import PROFILED
from sim.errors import ConfigError


def with_timing_numerics(config: Config) -> Config:
    """`config` itself when its numerics are on; otherwise `config` with a numerics section that
    trains the workload's zoo model (a synthetic workload has none: ConfigError)."""
    if config.numerics_on:
        return config
    workload = config.workload
    if workload.model == "synthetic":
        raise ConfigError(
            "numerics: the real backend trains a model, and a synthetic workload has none; use a zoo model "
            "(workload.model) or add a numerics: section (see configs/real_2x2_digits.yaml)"
        )
    if workload.model == PROFILED:  # the module is the user's file, which the ranks do not build
        raise ConfigError(
            "numerics: the real backend trains a zoo model or a numerics: section's model, not a profiled module; "
            "add a numerics: section to run it on real processes"
        )
    model = canonical_name(workload.model)
    workers = build_cluster(config.cluster, config.seed).world_size
    global_batch = workload.batch_size * workers
    zoo: dict[str, int] = {"samples": min(1_000_000, 2 * global_batch)}  # 80% for training: a batch per worker
    if model in SEQUENCE_LENGTHS:  # the zoo's own lengths: the FLOPs the simulator counts are the ones trained
        zoo["sequence"] = SEQUENCE_LENGTHS[model]
    if workload.transformer is not None:  # the decoder workload.transformer describes, at its own length
        zoo["sequence"] = workload.transformer.architecture().seq_len
    data = config.model_dump(mode="json")
    data["workload"] = {**data["workload"], "model": model}
    data["numerics"] = {
        "dataset": "synthetic",
        "model": model,
        "global_batch": global_batch,
        "zoo": zoo,
        "eval_every": config.iterations,  # one evaluation, at the end: this run is for timing
    }
    return parse_config(data)
