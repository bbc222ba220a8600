"""DiLoCo and Streaming DiLoCo as op programs (`policies/diloco.py`, `policies/streaming_diloco.py`): the ops each
step plans, the fragments' staggered schedule, the bytes, and the settings refused by name. What the ops do to
tensors is tested per backend (numerics, real) and in tests/test_local_ops.py."""

from __future__ import annotations

from typing import Any

import pytest

from policies import ClusterView, HostInfo, ModelInfo
from policies.base import Bucket, SettingError
from policies.diloco import DiLoCo
from policies.ops import AllGather, AllReduce, Combine, Encode, Group, OptimizerStep, Payload, ReduceScatter, Wait
from policies.registry import available, create
from policies.streaming_diloco import StreamingDiLoCo
from policies.tensors import Codec, Fragment, Optimizer
from policies.wire import wire_nbytes

WORLD = Group((0, 1, 2, 3))
PARAMETER_BYTES = 8e8  # fp32 parameters
BUCKETS = (1e8,) * 8


def bound(policy: Any, buckets: tuple[float, ...] = BUCKETS) -> Any:
    hosts = [f"h{i}" for i in range(4)]
    view = ClusterView(
        rank_hosts=tuple(hosts),
        hosts={h: HostInfo(h, None, (i,), 3.125e9, 1.5e11) for i, h in enumerate(hosts)},
        racks={},
    )
    policy.bind(view, ModelInfo(parameter_bytes=PARAMETER_BYTES, bucket_bytes=buckets))
    return policy


def test_both_are_registered() -> None:
    assert available()["diloco"] == "policies.diloco:DiLoCo"
    assert available()["streaming_diloco"] == "policies.streaming_diloco:StreamingDiLoCo"


def test_diloco_warms_up_data_parallel_then_takes_an_outer_step_every_period() -> None:
    policy = bound(DiLoCo(period=3, warmup_steps=2))
    bucket = Bucket(0, 1e8, 8)
    assert [bool(list(policy.on_gradients(0, s, bucket))) for s in range(6)] == [True, True, False, False, False, False]
    # every warm-up step: the anchor follows the data-parallel model, which is the global one then
    assert [list(policy.end_step(0, s)) for s in (0, 1)] == [[Combine("anchor", ((1.0, "parameters"),))]] * 2
    assert [list(policy.end_step(0, s)) for s in (2, 3)] == [[], []]
    outer = Optimizer("sgd", lr=0.7, momentum=0.9, nesterov=True)  # the paper's defaults
    assert list(policy.end_step(0, 4)) == [
        Combine("outer_gradient", ((1.0, "anchor"), (-1.0, "parameters"))),  # anchor - local: a descent direction
        AllReduce(WORLD, PARAMETER_BYTES, payload=Payload.PARAMETERS, tensor="outer_gradient"),
        OptimizerStep("anchor", "outer_gradient", outer),
        Combine("parameters", ((1.0, "anchor"),)),
    ]
    assert policy.global_tensor == "anchor"
    assert [b.name for b in policy.buffers()] == ["anchor", "outer_gradient"]


def test_diloco_sends_its_pseudo_gradient_in_the_wire_type_with_error_feedback() -> None:
    policy = bound(DiLoCo(period=1, wire="int8", block=64, error_feedback=True))
    ops = list(policy.end_step(0, 0))
    assert ops[1] == Encode("outer_gradient", Codec("int8", 64), residual="residual")
    sent = ops[2]
    assert sent.elements == PARAMETER_BYTES / 4 and sent.nbytes == wire_nbytes(PARAMETER_BYTES / 4, "int8", 64)
    assert "residual" in [b.name for b in policy.buffers()]


@pytest.mark.parametrize(
    ("name", "settings", "field", "allowed"),
    [
        ("diloco", {"period": 0}, "period", "from 1 to 100000"),
        ("diloco", {"error_feedback": True}, "error_feedback", "needs wire"),
        ("diloco", {"outer_lr": 0}, "outer_lr", "greater than 0"),
        ("diloco", {"wire": "int4"}, "wire", "'fp32'"),
        ("streaming_diloco", {"mixing": 1.5}, "mixing", "less than or equal to 1"),
    ],
)
def test_bad_settings_are_refused_by_name(name: str, settings: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=field) as info:
        create(name, settings)
    assert allowed in str(info.value)


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"fragments": 3}, "fragments", r"must divide the model's 8 gradient buckets; allowed: \[1, 2, 4, 8\]"),
        ({"period": 8, "fragments": 4, "overlap_steps": 2}, "overlap_steps", "must be below H/P = 8/4"),
    ],
)
def test_streaming_settings_that_do_not_fit_the_model_are_refused(settings: dict, field: str, message: str) -> None:
    with pytest.raises(SettingError, match=message) as info:
        bound(StreamingDiLoCo(**settings))
    assert info.value.field == field


def launches(policy: StreamingDiLoCo, steps: int) -> dict[int, list[int]]:
    """step -> the fragments whose all-reduce it launches."""
    found: dict[int, list[int]] = {}
    for step in range(steps):
        for op in policy.end_step(0, step):
            if isinstance(op, AllReduce):
                assert op.handle == f"fragment{op.fragment.index}"
                found.setdefault(step, []).append(op.fragment.index)
    return found


def test_streaming_fragments_sync_every_period_on_a_staggered_schedule() -> None:
    policy = bound(StreamingDiLoCo(period=8, fragments=4, overlap_steps=1))
    # o_p = p * H / P = 0 (taken as H), 2, 4, 6: fragment p launches after inner steps o_p - 1 + k * H
    assert launches(policy, 17) == {1: [1], 3: [2], 5: [3], 7: [0], 9: [1], 11: [2], 13: [3], 15: [0]}
    frags = [op.fragment for op in policy.end_step(0, 7) if isinstance(op, AllReduce)]
    assert frags == [Fragment(0, 4)] and frags[0].buckets(8) == (0, 4)
    # each fragment's all-reduce moves its two buckets' parameters: a quarter of the model
    sent = [op for op in policy.end_step(0, 7) if isinstance(op, AllReduce)][0]
    assert sent.nbytes == PARAMETER_BYTES / 4 and sent.payload is Payload.PARAMETERS


def test_streaming_waits_tau_steps_after_a_launch_then_mixes() -> None:
    policy = bound(StreamingDiLoCo(period=8, fragments=4, overlap_steps=1, mixing=0.25))
    ops = list(policy.end_step(0, 8))  # fragment 0 launched at step 7: its result is awaited at step 8
    assert ops == [
        Wait("fragment0"),
        OptimizerStep("anchor", "outer_gradient", policy.outer, fragment=Fragment(0, 4)),
        Combine("parameters", ((0.25, "parameters"), (0.75, "anchor")), fragment=Fragment(0, 4)),
    ]
    # no overlap: the all-reduce blocks and the parameters take the anchor, as DiLoCo's do
    blocking = bound(StreamingDiLoCo(period=8, fragments=4, overlap_steps=0))
    ops = list(blocking.end_step(0, 7))
    assert all(getattr(op, "handle", None) is None for op in ops) and not any(isinstance(op, Wait) for op in ops)
    assert ops[-1] == Combine("parameters", ((1.0, "anchor"),), fragment=Fragment(0, 4))


def test_one_fragment_and_no_overlap_plans_diloco_on_the_whole_model() -> None:
    streaming = bound(StreamingDiLoCo(period=5, fragments=1, overlap_steps=0))
    plain = bound(DiLoCo(period=5))
    for step in range(12):
        ours = [
            op if not hasattr(op, "fragment") or op.fragment is None else type(op)(**{**op.__dict__, "fragment": None})
            for op in streaming.end_step(0, step)
        ]
        assert ours == list(plain.end_step(0, step))


def two_hosts_of_two() -> ClusterView:
    return ClusterView(
        rank_hosts=("a", "a", "b", "b"),
        hosts={h: HostInfo(h, None, ranks, 3.125e9, 1.5e11) for h, ranks in (("a", (0, 1)), ("b", (2, 3)))},
        racks={},
    )


def test_replicas_of_a_host_train_data_parallel_and_average_in_two_dimensions() -> None:
    policy = DiLoCo(period=2, replica="host")
    policy.bind(two_hosts_of_two(), ModelInfo(parameter_bytes=PARAMETER_BYTES, bucket_bytes=BUCKETS))
    assert list(policy.on_gradients(3, 0, Bucket(0, 1e8, 8))) == [AllReduce(Group((2, 3)), 1e8)]  # inside the host
    ops = list(policy.end_step(3, 1))
    inside, across = Group((2, 3)), Group((1, 3))  # rank 3 is the second rank of host b: it meets host a's second
    where = {"payload": Payload.PARAMETERS, "tensor": "outer_gradient"}
    assert ops[1:4] == [
        ReduceScatter(inside, PARAMETER_BYTES, **where),
        AllReduce(across, PARAMETER_BYTES / 2, **where),  # each share crosses between the replicas once
        AllGather(inside, PARAMETER_BYTES, **where),
    ]


def test_a_replica_level_the_cluster_lacks_is_refused_by_name() -> None:
    with pytest.raises(SettingError, match="replica: this cluster is one datacenter") as info:
        DiLoCo(replica="datacenter").bind(two_hosts_of_two(), ModelInfo(PARAMETER_BYTES, BUCKETS))
    assert info.value.field == "replica"
    with pytest.raises(SettingError, match="allowed: rank"):
        StreamingDiLoCo(replica="host").bind(two_hosts_of_two(), ModelInfo(PARAMETER_BYTES, BUCKETS))
