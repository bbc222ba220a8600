"""In-process tests of the real backend's pieces that need no process group: group planning,
accounting of waits, the launcher's verdict, and the validation table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")

from helpers import two_tier  # noqa: E402

from policies.base import Bucket  # noqa: E402
from policies.ops import Group  # noqa: E402
from real.accounting import RankReport, account  # noqa: E402
from real.groups import group_order, planned_groups  # noqa: E402
from real.launch import Outcome  # noqa: E402
from real.session import _first_sentence  # noqa: E402
from real.validate import compare, markdown  # noqa: E402
from sim.api import prepare  # noqa: E402
from sim.config import load_config, parse_config  # noqa: E402
from sim.engine.run import bind_policy  # noqa: E402


def bound(policy: dict, racks: int = 2, hosts: int = 2, gpus: int = 1):  # type: ignore[no-untyped-def]
    config = parse_config(
        {
            "cluster": two_tier(racks, hosts, 12.5, 25, gpus_per_host=gpus),  # 4:1 uplinks
            "workload": {
                "model": "synthetic",
                "gradient_mb": 8,
                "compute_ms": 1,
                "synthetic_layers": 2,
                "bucket_mb": 4,
            },
            "policies": [policy],
        }
    )
    cluster, plan = prepare(config)
    buckets = [Bucket(i, b.nbytes, len(plan.buckets)) for i, b in enumerate(plan.buckets)]
    return bind_policy(config.policies[0], 0, cluster, plan), buckets


def test_planned_groups_list_every_group_once_in_first_use_order() -> None:
    policy, buckets = bound({"name": "hierarchical", "level": "rack"})
    assert planned_groups(policy, 4, 3, buckets) == [Group((0, 1)), Group((0, 2)), Group((1, 3)), Group((2, 3))]
    ring, buckets = bound({"name": "ring"})
    assert planned_groups(ring, 4, 5, buckets) == [Group((0, 1, 2, 3))]
    ds, buckets = bound({"name": "ds_sync"})
    groups = {g.ranks for g in planned_groups(ds, 4, ds.cycle_length, buckets)}
    expected = {tuple(sorted(g.ranks)) for step in range(ds.cycle_length) for g in ds.pattern(step) if g.size > 1}
    assert groups == expected and len(groups) >= 3  # rack pairs plus the mixing pairs
    ps, buckets = bound({"name": "ps"})
    assert planned_groups(ps, 4, 3, buckets) == []


def test_group_order_maps_torch_member_order_to_the_policy_order() -> None:
    assert group_order(Group((2, 0, 1))) == [1, 2, 0]  # torch member j is global rank sorted[j]
    assert group_order(Group((0, 1))) == [0, 1]


def test_wait_is_the_time_until_the_last_member_issued() -> None:
    early, late = RankReport(0), RankReport(1)
    # one all-reduce: rank 0 issues at 1.0, rank 1 at 1.3, both finish at 1.5
    early.collectives = [(0, 0, (0, 1), 0, "AllReduce", 400, 1.0, 1.5)]
    late.collectives = [(0, 1, (0, 1), 0, "AllReduce", 400, 1.3, 1.5)]
    early.blocked = [(0, 1.6, 1.7)]  # a pull the server held
    early.rows = [(0, 0, 0.0, 0.1, 0.5, 1.0, 2.0, 0.5, 0.0, 0)]
    late.rows = [(0, 1, 0.0, 0.1, 0.8, 1.3, 2.0, 0.5, 0.0, 0)]
    rows, ops = account([early, late])
    waits = {row[1]: row[8] for row in rows}
    assert waits[0] == pytest.approx(0.3 + 0.1) and waits[1] == 0.0
    (op,) = ops
    assert op[2] == "AllReduce" and op[8:11] == (1.0, 1.3, 1.5)  # issued by the first, launched by the last
    assert np.isnan(op[11]) and np.isnan(op[12])  # a dense call: no wire bytes or imbalance


def test_a_sparse_call_reports_what_its_members_sent_and_how_evenly_they_received() -> None:
    reports = [RankReport(0), RankReport(1)]
    # a sparse all-to-all: rank 0 sent 100 bytes and received 300, rank 1 sent 300 and received 100
    reports[0].collectives = [(0, 0, (0, 1), 0, "AllToAll", 100, 1.0, 1.5, 300)]
    reports[1].collectives = [(0, 1, (0, 1), 0, "AllToAll", 300, 1.0, 1.5, 100)]
    for report in reports:
        report.rows = [(0, report.rank, 0.0, 0.1, 0.5, 1.0, 2.0, 0.5, 0.0, 0)]
    _, (op,) = account(reports)
    assert op[11] == 400.0 and op[12] == pytest.approx(1.5)  # max 300 over mean 200


def test_the_verdict_names_the_rank_that_caused_the_failure() -> None:
    assert Outcome({0: 0, 1: 0}).ok and Outcome({0: 0, 1: 0}).failed is None
    assert Outcome({0: 3, 1: -9, 2: 3}).failed == "rank 1 was killed by SIGKILL"
    assert Outcome({0: 3, 1: None, 2: 3}).failed == "rank 1 stopped responding (killed after the timeout)"
    assert Outcome({0: 3, 1: 0}).failed == "rank 0 gave up waiting for its peers"


def test_gloo_messages_are_cut_to_what_happened() -> None:
    exc = RuntimeError(
        "[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:35005. This is typically caused by a remote worker crashing."
    )
    assert _first_sentence(exc) == "Connection closed by peer [127.0.0.1]:35005"


def _iterations(policy: str, seconds: float, ranks: int = 2, n: int = 6) -> pd.DataFrame:
    rows = [
        {"policy": policy, "iteration": i, "rank": r, "start_s": i * seconds, "end_s": (i + 1) * seconds,
         "iteration_s": seconds, "samples": 16}
        for i in range(n) for r in range(ranks)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_validation_compares_steady_iterations_and_throughput(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": {"topology": "star", "hosts": 2},
                "workload": {"model": "synthetic", "gradient_mb": 1, "compute_ms": 1},
                "policies": [{"name": "ring"}, {"name": "asp"}],
            }
        )
    )
    for side, ring_s, asp_s in (("sim", 0.105, 0.2), ("real", 0.1, 0.25)):
        (tmp_path / side).mkdir()
        frame = pd.concat([_iterations("ring", ring_s), _iterations("asp", asp_s)])
        frame.loc[frame["iteration"] == 0, "iteration_s"] = 9.0  # warm-up: dropped on both sides
        frame.to_csv(tmp_path / side / "iterations.csv", index=False)
    table = compare(config, tmp_path / "sim", tmp_path / "real", warmup=1).set_index("policy")
    assert table.loc["ring", "error"] == pytest.approx(0.05)  # iteration time: 105 vs 100 ms
    assert table.loc["ring", "within"]
    assert table.loc["asp", "compared"] == "throughput"
    assert table.loc["asp", "error"] == pytest.approx(0.25 / 0.2 - 1)  # samples/s: 1/0.2 vs 1/0.25
    assert not table.loc["asp", "within"] and table.loc["asp", "tolerance"] == 0.15
    text = markdown(table.reset_index())
    assert "| ring | iteration time | 105.0 | 100.0 |" in text and "+25.0%" in text
    assert table.loc["ring", "predicted_by"] == "one simulation" and "out of step" not in text

    # with the out-of-step ensemble, ASP is predicted by its medians; the single run stays beside them
    ensemble = pd.DataFrame(
        {"policy": "asp", "seed": [0, 1, 2], "mean_iteration_s": [0.24, 0.26, 0.30],
         "throughput_samples_s": [130.0, 125.0, 100.0]}
    )  # fmt: skip
    table = compare(config, tmp_path / "sim", tmp_path / "real", warmup=1, ensemble=ensemble).set_index("policy")
    assert table.loc["asp", "predicted_samples_s"] == 125.0 and table.loc["asp", "predicted_iteration_ms"] == 260.0
    assert table.loc["asp", "error"] == pytest.approx(125.0 / 128.0 - 1)  # measured: 2 x 16 samples / 0.25 s
    assert (table.loc["asp", "predicted_low_samples_s"], table.loc["asp", "predicted_high_samples_s"]) == (100, 130)
    assert table.loc["asp", "in_step_samples_s"] == pytest.approx(160.0) and table.loc["asp", "within"]
    assert table.loc["ring", "error"] == pytest.approx(0.05)  # synchronous policies: untouched
    assert "asp: predicted by the median" in markdown(table.reset_index())


def test_a_validation_without_asynchronous_policies_has_no_out_of_step_rows() -> None:
    """`syncsim validate` on a config of synchronous policies alone (configs/emulate_wan_2dc.yaml) failed
    after the real run: the out-of-step ensemble was asked for a config of no policies."""
    from real.validate import OUT_OF_STEP_COLUMNS, out_of_step

    config = load_config(Path(__file__).parent.parent / "configs" / "emulate_wan_2dc.yaml")
    rows = out_of_step(config, warmup=3)
    assert rows.empty and list(rows.columns) == OUT_OF_STEP_COLUMNS


def test_a_frame_carries_its_header_exactly_and_its_payload() -> None:
    import torch

    from real import protocol as wire

    values = torch.tensor([1.5, -2.0, 3.25])
    big = 2**40 + 7  # an int64 the float32 slots must carry bit for bit
    message = wire.frame(wire.Kind.PUSH, key=5, a=big, b=big + 3, value=-1, payload=values)
    assert message.dtype == torch.float32 and message.numel() == wire.HEADER_FLOATS + 3
    assert wire.header_of(message) == (wire.Kind.PUSH, 5, big, big + 3, -1)
    # a shard receives into a buffer sized for the largest frame; the payload is read by the header's range
    buffer = torch.full((wire.HEADER_FLOATS + 10,), float("nan"))
    buffer[: message.numel()] = message
    assert torch.equal(wire.payload_of(buffer, big, big + 3), values)
    assert wire.header_of(wire.frame(wire.Kind.DONE))[0] == wire.Kind.DONE


def test_shards_post_fewer_receives_for_large_models() -> None:
    from real import protocol as wire

    assert wire.preposted(300_000) == wire.PREPOSTED  # the digits MLP
    assert wire.preposted(25_557_032) == 2  # ResNet-50: 2 x 102 MB
    assert wire.preposted(335_141_888) == 1  # BERT-large: one 1.3 GB buffer per worker


def test_backends_auto_follows_cuda_and_a_bad_choice_names_the_field() -> None:
    import torch

    from real.backends import backend_for, device_for
    from sim.errors import ConfigError

    assert backend_for("gloo") == backend_for("gloo", calibrate=True) == "gloo"
    with pytest.raises(ConfigError, match="backend: 'mpi'; allowed: auto, gloo, nccl"):
        backend_for("mpi", calibrate=True)
    assert str(device_for("gloo", 3)) == "cpu"
    if not torch.cuda.is_available():
        assert backend_for("auto") == backend_for("auto", calibrate=True) == "gloo"
        for calibrate in (False, True):
            with pytest.raises(ConfigError, match="backend: 'nccl'.*CUDA.*none; allowed here: auto, gloo"):
                backend_for("nccl", calibrate)


def test_a_bundled_validation_reads_back_and_its_table_recomputes() -> None:
    """The measured 2x2 validation shipped for the calibration notebook: its comparison follows from
    its own saved runs, through the public reader."""
    from real.validate import Validation
    from sim.bundled import measured

    v = Validation.read(measured("validate_2x2"))
    assert set(v.calibration()) == {"collectives", "computes", "pairs", "uplinks"}
    assert v.calibrated_config().cluster.topology == "two_tier"
    assert set(v.simulated().summary["policy"]) == set(v.measured().summary["policy"]) == set(v.table["policy"])
    again = compare(v.out / "calibrated.yaml", v.out / "sim", v.out / "real", 3, v.out_of_step())
    pd.testing.assert_frame_equal(again, v.table, check_dtype=False)
    with pytest.raises(FileNotFoundError, match="no bundled validation 'nope'; bundled: validate_2x2"):
        measured("nope")


def test_a_config_without_numerics_gets_its_zoo_model_on_synthetic_data() -> None:
    from real.timing_run import with_timing_numerics
    from sim.errors import ConfigError

    base = {
        "cluster": {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 2},
        "workload": {"model": "BERT-base", "batch_size": 3},
        "policies": [{"name": "ring"}],
        "iterations": 7,
    }
    config = with_timing_numerics(parse_config(base))
    n = config.numerics
    assert n is not None and (n.dataset, n.model, n.global_batch, n.eval_every) == ("synthetic", "bert_base", 24, 7)
    assert n.zoo.sequence == 128 and n.zoo.samples == 48 and config.workload.model == "bert_base"
    with_numerics = parse_config(
        {**base, "workload": {"model": "synthetic", "gradient_mb": 1, "compute_ms": 1}, "numerics": {"global_batch": 8}}
    )
    assert with_timing_numerics(with_numerics) is with_numerics  # a section that is on is kept as it is
    with pytest.raises(ConfigError, match="numerics: the real backend trains a model, and a synthetic workload has"):
        with_timing_numerics(parse_config({**with_numerics.model_dump(mode="json"), "numerics": None}))


def test_a_config_without_numerics_trains_workload_transformers_decoder_at_its_length() -> None:
    from real.timing_run import with_timing_numerics

    transformer = {"layers": 1, "hidden": 16, "heads": 2, "vocab": 40, "seq_len": 24}
    base = {
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 1},
        "workload": {"model": "transformer", "transformer": transformer, "batch_size": 2},
        "policies": [{"name": "ring"}],
        "iterations": 3,
    }
    n = with_timing_numerics(parse_config(base)).numerics
    assert n is not None and (n.model, n.zoo.sequence, n.global_batch) == ("transformer", 24, 4)


def test_a_rank_whose_calibration_cannot_fit_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import real.calibrate.session
    from real.__main__ import run
    from real.calibrate.errors import CalibrationError

    def cannot_fit(*args: object) -> int:
        raise CalibrationError("uplinks: rack egress no slower than a NIC; measure with a larger uplink_bytes")

    monkeypatch.setattr(real.calibrate.session, "main", cannot_fit)
    monkeypatch.setenv("RANK", "0")
    config = str(Path(__file__).parent.parent / "configs" / "real_2x2_digits.yaml")
    assert run([config, "--out", "unused.yaml", "--calibrate"]) == 1
    assert capsys.readouterr().err == (
        "rank 0: CalibrationError: uplinks: rack egress no slower than a NIC; measure with a larger uplink_bytes\n"
    )


def test_the_real_backend_refuses_in_graph_replication_by_name() -> None:
    """One client feeding every worker is a simulator model; real workers are processes of their own."""
    from real.layout import placement
    from sim.errors import ConfigError

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "real_2x2_digits.yaml").read_text())
    raw["policies"] = [{"name": "ring"}, {"name": "sync_switch", "first": {"name": "ps", "replication": "in_graph"}}]
    with pytest.raises(ConfigError, match=r"policies\[1\]: 'replication: in_graph'.*allowed here: between_graph"):
        placement(parse_config(raw))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("accumulation_steps", 4, r"workload.accumulation_steps: 4 .*allowed here: 1"),
        ("overlap_backward", False, r"workload.overlap_backward: false .*allowed here: true"),
        ("activation_checkpointing", True, r"workload.activation_checkpointing: true .*allowed here: false"),
    ],
)
def test_the_real_backend_refuses_the_simulators_timing_keys_by_name(key: str, value: object, message: str) -> None:
    """Gradient accumulation and a backward that hands on no bucket before it ends change when the
    simulated workers communicate; the real backend has neither, so it says so rather than ignore them."""
    from real.layout import placement
    from sim.errors import ConfigError

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "real_2x2_digits.yaml").read_text())
    raw.pop("numerics", None)
    raw["workload"] = {**raw.get("workload", {}), key: value, "optimizer_ms": 1.0}
    with pytest.raises(ConfigError, match=message):
        placement(parse_config(raw))
