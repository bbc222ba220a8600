"""The cost estimate (`sim.estimate.cost`): counts against what the engine measures, and the limits that refuse a
run before anything is built (`syncsim check`, `syncsim run`, `simulate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import synthetic, two_tier

import sim.api
from policies.registry import BUILTIN, add_search_folder
from sim.api import simulate
from sim.cli import main
from sim.config import parse_config
from sim.errors import ConfigError
from sim.estimate.cost import estimate

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
# the documented accuracy is "within a factor of ~3"; flows follow the programs exactly but for
# groups of one and the first step's reads, so they are held closer
EVENTS_FACTOR = 3.0
FLOWS_FACTOR = 1.5
DENSE = ["ring", "hierarchical", "ps", "asp", "ssp", "no_sync", "ds_sync", "sync_switch", "local_sgd", "diloco",
         "streaming_diloco", "eager_diloco", "topk", "powersgd", "fsdp"]  # fmt: skip
# settings that make a 4-iteration run average (diloco: after steps 1 and 3; streaming: a fragment after 1 and 3)
SETTINGS = {
    "diloco": {"period": 2},
    "eager_diloco": {"period": 2},
    "streaming_diloco": {"period": 4, "fragments": 2, "overlap_steps": 1},
    "powersgd": {"warmup_steps": 1, "rank": 4},
}
SPARSE = ["zen", "sparse_allgather", "sparse_ps", "sparcml", "omnireduce"]


def small(policies: list[str], sparse: bool) -> dict[str, Any]:
    """8 GPUs (2 racks x 2 hosts x 2), 4 buckets, 4 iterations with jitter: each policy in about 0.1 s."""
    cluster = two_tier(2, 2, 25.0, gpus_per_host=2)
    data = synthetic(
        cluster, [{"name": p, **SETTINGS.get(p, {})} for p in policies], 40.0, compute_ms=20, iterations=4, jitter=0.05
    )
    data["workload"].update(bucket_mb=10.0, synthetic_layers=4)
    if sparse:
        data["workload"]["sparsity"] = {"topk": 0.01}
    return data


@pytest.fixture(scope="module")
def measured() -> dict[str, tuple[Any, Any]]:
    """policy -> (its estimate row, its measured run)."""
    out = {}
    for policies, sparse in ((DENSE, False), (SPARSE, True)):
        config = parse_config(small(policies, sparse))
        result = simulate(config)
        assert not result.errors
        out.update({row.label: (row, run) for row, run in zip(estimate(config).policies, result.runs)})
    return out


def test_every_builtin_policy_is_measured() -> None:
    assert sorted(DENSE + SPARSE) == sorted(BUILTIN)


@pytest.mark.parametrize("policy", DENSE + SPARSE)
def test_estimate_is_near_the_measured_events_and_flows(policy: str, measured: dict[str, tuple[Any, Any]]) -> None:
    row, run = measured[policy]
    assert (row.flows + 1) / (run.flows + 1) == pytest.approx(1, rel=FLOWS_FACTOR - 1), (row.flows, run.flows)
    assert 1 / EVENTS_FACTOR <= row.events / run.events <= EVENTS_FACTOR, (row.events, run.events)


def test_a_plug_in_counts_as_a_ring_and_says_so() -> None:
    data = small(["ring"], sparse=False)
    data["policies"].append({"name": "custom_policies:InterleavedRings", "label": "plug-in"})
    ring, plug = estimate(parse_config(data)).policies
    assert plug.flows == ring.flows and not ring.note
    assert "plug-in: counted as one all-reduce of all ranks per bucket" in str(estimate(parse_config(data)))


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_a_plug_in_counted_as_diloco_counts_its_butterfly_averages(model: str) -> None:
    """hivemind_diloco (configs/papers) derives from diloco, so it is counted as diloco; its averages'
    all-reduces are butterflies (two phases of a flow per ordered pair; pipelined: one transfer each), counted
    in place of the ring's: exactly the flows the run starts (counts of a program, nothing measured), events near the
    measured, and the note says how it was counted."""
    add_search_folder(ROOT / "configs" / "papers")
    data = small(["diloco"], sparse=False)
    data["policies"] = [{"name": "hivemind_diloco:HivemindDiLoCo", "period": 2}]
    data["simulation"]["collective_model"] = model
    config = parse_config(data)
    result = simulate(config)
    assert not result.errors
    row, run = estimate(config).policies[0], result.runs[0]
    assert row.note == "a plug-in: counted as diloco"
    assert row.flows == run.flows == (4 if model == "pipelined" else 2 * 2 * 8 * 7)  # 2 averages of 8 ranks
    assert 1 / EVENTS_FACTOR <= row.events / run.events <= EVENTS_FACTOR, (row.events, run.events)


def test_the_estimate_is_deterministic() -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    first, second = estimate(parse_config(data)), estimate(parse_config(yaml.safe_load(QUICKSTART.read_text())))
    assert first == second and str(first) == str(second)


def write(tmp_path: Path, data: dict[str, Any], name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def refuse_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    def built(*_args: Any) -> None:
        raise AssertionError("the cluster was built")

    monkeypatch.setattr(sim.api, "prepare", built)
    monkeypatch.setattr(sim.api, "_prepare", built)


@pytest.mark.parametrize(
    "change, shown",
    [
        ({"cluster": {"topology": "two_tier", "racks": 1000, "hosts_per_rack": 1000}}, "1,000,000 workers (GPUs)"),
        ({"iterations": 1_000_000_000}, "4 buckets x 1,000,000,000 iterations"),
    ],
)
def test_check_refuses_a_huge_run_from_its_estimate_without_building_it(
    change: dict[str, Any],
    shown: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refuse_to_build(monkeypatch)
    data = {**yaml.safe_load(QUICKSTART.read_text()), **change}
    assert main(["check", str(write(tmp_path, data))]) == 2
    out, err = capsys.readouterr()
    assert shown in out and "total" in out
    assert "simulation.max_estimated_wall_s: this run is estimated at ~" in err
    assert "over the limit of 3600 s; raise simulation.max_estimated_wall_s to run it anyway" in err


def test_check_prints_the_estimate_of_a_config_it_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(QUICKSTART)]) == 0
    out = capsys.readouterr().out
    assert "ok - 8 GPUs on 8 hosts" in out
    assert "estimate (rough, within a factor of ~3): 8 workers (GPUs) on 8 hosts" in out
    for label in ("no_sync", "ring", "hierarchical", "ps", "total"):
        assert f"\n  {label} " in out


def test_a_trillion_iterations_are_refused_by_validation() -> None:
    data = {**yaml.safe_load(QUICKSTART.read_text()), "iterations": 10**12}
    with pytest.raises(ConfigError, match=r"iterations: Input should be less than or equal to 1000000000"):
        parse_config(data)


def cheap(**simulation: Any) -> dict[str, Any]:
    """Two iterations of a ring on 4 hosts: over a tiny wall limit, yet cheap to run."""
    data = synthetic({"topology": "star", "hosts": 4}, [{"name": "ring"}], 10.0, compute_ms=5, iterations=2)
    data["simulation"].update(simulation)
    return data


def test_run_refuses_a_config_over_the_limit_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path, cheap(max_estimated_wall_s=0.001))), "--out", str(out), "--quiet"]) == 2
    (header, *lines) = capsys.readouterr().err.splitlines()
    assert header.startswith("config error in ") and len(lines) == 1
    assert lines[0].strip().startswith("simulation.max_estimated_wall_s: this run is estimated at ~")
    assert "over the limit of 0.001 s" in lines[0]
    assert not out.exists()  # refused before its output folder was made


def test_raising_the_limit_lets_the_same_config_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path, cheap(max_estimated_wall_s=60))), "--out", str(out), "--quiet"]) == 0
    assert (out / "summary.csv").exists()


def test_the_python_api_refuses_too(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_to_build(monkeypatch)
    with pytest.raises(ConfigError, match=r"^simulation.max_estimated_memory_mb: this run is estimated to need ~"):
        simulate(cheap(max_estimated_memory_mb=1))
    monkeypatch.undo()
    assert not simulate(cheap(max_estimated_memory_mb=10_000)).errors


def test_check_answers_a_cluster_too_large_to_build_quickly_from_its_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 x 1,000 hosts under a raised wall limit: accepted from the estimate, the 4M-link graph never built."""
    refuse_to_build(monkeypatch)
    data = {**yaml.safe_load(QUICKSTART.read_text()), "iterations": 1, "policies": [{"name": "ring"}]}
    data["cluster"] = {**data["cluster"], "racks": 1000, "hosts_per_rack": 1000}
    data["simulation"] = {"max_estimated_wall_s": 1e5, "max_estimated_memory_mb": 1e6}
    assert main(["check", str(write(tmp_path, data))]) == 0
    out = capsys.readouterr().out
    assert "ok as far as the config and its estimate go - 1,000,000 GPUs" in out
    assert "note: the cluster was not built (~40 s for 4,002,000 links)" in out


def _storm() -> dict[str, Any]:
    """A straggler on every rank firing every millisecond, over ~30,000 simulated seconds of compute."""
    data = {**yaml.safe_load(QUICKSTART.read_text()), "iterations": 300_000, "policies": [{"name": "ring"}]}
    data["faults"] = {"stragglers": [{"ranks": list(range(8)), "compute_factor": 2, "every_s": 0.001,
                                      "duration_s": 0.0005}]}  # fmt: skip
    return data


@pytest.mark.parametrize(
    "data, limit, term",
    [
        (_storm(), "max_estimated_wall_s", "mostly fault and background events: ~"),
        (  # 2^20 shards on 4 hosts: each a process, its state and a slice of every bucket's ops
            {"iterations": 20, "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 25},
             "workload": {"model": "resnet50", "batch_size": 64},
             "simulation": {"max_estimated_memory_mb": 2000},
             "policies": [{"name": "ps", "shards": 2**20}]},
            "max_estimated_memory_mb", "mostly server shards: ~",
        ),
        (  # numerics DeepFM with 10^7 rows: 64 replicas of ~1.1e8 parameters with gradients and momentum
            {"iterations": 20, "cluster": {"topology": "star", "hosts": 64, "nic_gbps": 25},
             "workload": {"model": "deepfm", "batch_size": 64},
             "numerics": {"model": "deepfm", "dataset": "synthetic", "zoo": {"features": 10_000_000}},
             "policies": [{"name": "ring"}]},
            "max_estimated_memory_mb", "mostly numerics model, optimizer state and batches: ~",
        ),
    ],
    ids=["straggler_every_ms", "ps_2e20_shards", "numerics_deepfm_1e7"],
)  # fmt: skip
def test_check_refuses_what_the_program_alone_does_not_show_naming_the_term(
    data: dict[str, Any],
    limit: str,
    term: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault storms, server shards and numerics models are counted, and the refusal names what dominates."""
    refuse_to_build(monkeypatch)
    assert main(["check", str(write(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert f"simulation.{limit}: this run is estimated" in err
    assert term in err


def test_numerics_memory_follows_the_feature_rows_and_the_optimizer() -> None:
    base = {"iterations": 2, "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 25},
            "workload": {"model": "deepfm", "batch_size": 64}, "policies": [{"name": "ring"}],
            "numerics": {"model": "deepfm", "dataset": "synthetic", "zoo": {"features": 1000}}}  # fmt: skip
    small = dict(estimate(parse_config(base)).memory_terms)
    big = {**base, "numerics": {**base["numerics"], "zoo": {"features": 10_000_000}}}
    adam = {**big, "numerics": {**big["numerics"], "optimizer": {"name": "adam"}}}
    model = "numerics model, optimizer state and batches"
    grown = dict(estimate(parse_config(big)).memory_terms)[model] - small[model]
    # 4 workers x (params, grad, momentum) + the consensus and its momentum: 14 fp32 copies of 11 values per row
    assert grown == pytest.approx((10_000_000 - 1000) * 11 * 4 * 14 / 1e6, rel=1e-6)
    assert (
        dict(estimate(parse_config(adam)).memory_terms)[model] > dict(estimate(parse_config(big)).memory_terms)[model]
    )


def test_many_synchronous_shards_count_an_apply_per_shard_bucket_and_round() -> None:
    """1,024 shards on 4 hosts: the engine's events are the shards' applies, not the workers' program."""
    data = {"iterations": 2, "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 25},
            "workload": {"model": "resnet50", "batch_size": 64}, "simulation": {"trace": False},
            "policies": [{"name": "ps", "shards": 1024}, {"name": "asp", "shards": 1024}]}  # fmt: skip
    config = parse_config(data)
    result = simulate(config)
    for row, run in zip(estimate(config).policies, result.runs):
        assert 1 / EVENTS_FACTOR <= row.events / run.events <= EVENTS_FACTOR, (row.label, row.events, run.events)


def test_the_sparse_index_sets_memory_covers_their_census() -> None:
    """5M lookups per worker in a 10M-row table: the census of one bucket's index sets (traced by
    tracemalloc, which numpy reports to) is what the estimate's sparse term must cover."""
    import tracemalloc

    from sim.catalog.gpus import get_gpu
    from sim.compute.sparse_traffic import SparseTraffic
    from sim.compute.sparsity import IndexSets
    from sim.compute.workload import compute_plan

    data = {"cluster": {"topology": "star", "hosts": 4}, "policies": [{"name": "zen"}],
            "workload": {"model": "synthetic", "gradient_mb": 40.0, "compute_ms": 5.0,
                         "sparsity": {"lookups": 5_000_000, "zipf_s": 0.5}}}  # fmt: skip
    config = parse_config(data)
    term = next(mb for name, mb in estimate(config).memory_terms if "sparse" in name)
    plan = compute_plan(config.workload, get_gpu(config.cluster.gpu))
    tracemalloc.start()
    try:
        SparseTraffic(IndexSets(plan.layouts, 0)).census(0, 0, (0, 1, 2, 3), "hash", 4)
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    assert peak <= term <= 3 * peak, (peak, term)


@pytest.mark.parametrize("network", ["nccl", "ideal"])
def test_stepwise_rings_are_counted_only_where_the_network_model_runs_them(network: str) -> None:
    """`collective_model: stepwise` splits a dense ring into p flows a step on the ideal network only:
    the NCCL model runs each dense collective as its plan, one transfer."""
    data = small(["ring", "hierarchical"], sparse=False)
    data["simulation"] = {"collective_model": "stepwise", "network_model": network}
    config = parse_config(data)
    for row, run in zip(estimate(config).policies, simulate(config).runs):
        assert (row.flows + 1) / (run.flows + 1) == pytest.approx(1, rel=FLOWS_FACTOR - 1), (row.flows, run.flows)
        assert 1 / EVENTS_FACTOR <= row.events / run.events <= EVENTS_FACTOR, (row.events, run.events)


def test_a_numerics_step_follows_the_parameters_it_passes_over() -> None:
    """DeepFM's table rows add parameters but almost no FLOPs: each worker's step still passes over all of
    them (gradients, averaging, optimizer), so 100x the rows is a much slower run."""
    data = {"iterations": 20, "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 25},
            "workload": {"model": "deepfm", "batch_size": 64}, "policies": [{"name": "ring"}],
            "simulation": {"max_estimated_memory_mb": 1e6},
            "numerics": {"model": "deepfm", "dataset": "synthetic", "zoo": {"features": 100_000}}}  # fmt: skip
    small = estimate(parse_config(data)).wall_s
    data["numerics"]["zoo"]["features"] = 10_000_000
    assert estimate(parse_config(data)).wall_s > 5 * small


@pytest.mark.parametrize(
    ("period", "fragments", "local_steps", "expected"),
    [
        (4, 2, 8, 4),  # fragment 1 after local steps 1, 5; fragment 0 after 3, 7
        (4, 2, 1, 0),  # fragment 1's first send is after local step 1 (o_1 = 2)
        (4, 2, 2, 1),
        (6, 3, 12, 6),  # offsets 6, 2, 4: two sends each in 12 steps
        (5, 1, 14, 2),  # one fragment: after steps 4 and 9, as diloco
    ],
)
def test_streaming_diloco_counts_one_send_per_fragment_and_period(
    period: int, fragments: int, local_steps: int, expected: int
) -> None:
    from policies.registry import create
    from sim.estimate.counts import outer_steps

    s = create("streaming_diloco", {"period": period, "fragments": fragments, "overlap_steps": 0}).settings
    assert outer_steps("streaming_diloco", s, local_steps) == expected
    policy = create("streaming_diloco", {"period": period, "fragments": fragments, "overlap_steps": 0})
    sends = [(p, step) for step in range(local_steps) for p in range(fragments) if policy.syncs_after(step, p)]
    assert len(sends) == expected  # the policy's own schedule agrees


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"name": "diloco", "period": 0}, "policies[0].period: allowed: an integer from 1 to 100000 (got 0)"),
        ({"name": "streaming_diloco", "fragments": 3}, "policies[0].fragments: must divide the model's 4 gradient"),
        (
            {"name": "streaming_diloco", "period": 8, "fragments": 2, "overlap_steps": 4},
            "policies[0].overlap_steps: must be below H/P = 8/2 (got 4)",
        ),
        ({"name": "streaming_diloco", "wire": "fp12"}, "policies[0].wire: should be 'fp32', 'bf16'"),
    ],
)
def test_check_takes_the_diloco_family_and_refuses_bad_settings_by_name(
    settings: dict[str, Any], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small(["ring"], sparse=False)
    data["policies"] = [{"name": settings["name"]}]
    assert main(["check", str(write(tmp_path, data))]) == 0
    data["policies"] = [settings]
    assert main(["check", str(write(tmp_path, data))]) == 2
    assert line in capsys.readouterr().err


def test_replicas_of_several_ranks_count_their_inner_all_reduces_and_2d_averages() -> None:
    """local_sgd with a replica per host (2 GPUs) and diloco with one per rack (4 GPUs, one warm-up step):
    per later bucket an all-reduce inside each replica, per average a reduce-scatter and an all-gather
    inside each replica and an all-reduce across them in g groups; the estimate's collectives are the
    run's, its flows and events within the stated factors."""
    data = small(["ring"], sparse=False)
    data["policies"] = [
        {"name": "local_sgd", "period": 2, "replica": "host", "label": "host"},
        {"name": "diloco", "period": 2, "replica": "rack", "warmup_steps": 1, "label": "rack"},
    ]
    config = parse_config(data)
    result = simulate(config)
    assert not result.errors
    # host: 4 buckets x 4 steps x 4 replicas + 2 averages x (4 + 2 + 4); rack: 4 rings of warm-up + 4 buckets
    # x 3 steps x 2 replicas + 1 average x (2 + 4 + 2)
    assert [row.collectives for row in estimate(config).policies] == [84, 36]
    for row, run in zip(estimate(config).policies, result.runs):
        assert sum(1 for op in run.ops if op[1] == -1) == row.collectives
        assert (row.flows + 1) / (run.flows + 1) == pytest.approx(1, rel=FLOWS_FACTOR - 1), (row.flows, run.flows)
        assert 1 / EVENTS_FACTOR <= row.events / run.events <= EVENTS_FACTOR, (row.events, run.events)
