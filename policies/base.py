"""The interface every synchronization policy implements.

A policy is a small object: validated *settings* (a pydantic model, fixed after construction), a
*plan* derived once from the cluster view in `bind`, and evolving *state* (exposed through
`state_dict` for checkpoints). Backends call its hooks per worker and per step; each hook returns a
program of ops (see `policies.ops`). Hooks must be pure functions of (settings, plan, state, args):
the same calls give the same ops on every backend.

Lifecycle per worker and step::

    bind(view, model)                   once, before any hook
    begin_step(rank, step)              before forward (e.g. SSP's clock bound)
    on_forward(rank, step, bucket)      the parameters forward needs: one program per bucket, run one
                                        after another in forward order (last bucket first); forward
                                        of a bucket's layers waits for its program (a PS read, an
                                        FSDP-style all-gather), so reads overlap forward compute
    on_backward(rank, step, bucket)     the parameters a bucket's backward needs: one program per bucket, run
                                        one after another in backward order from backward's start; backward
                                        of a bucket's layers waits for its program (FSDP's all-gather before
                                        backward, when parameters were freed after forward)
    on_gradients(rank, step, bucket)    as each gradient bucket is ready during backward
    end_step(rank, step)                after backward and the local optimizer step (e.g. averaging)

Phases (`policies.phases`): backends ask `next_phase(progress)` for each stretch of the run; the
default is this policy alone for the whole budget. Adaptive phases report finished iterations to
`observe` and end when `phase_over()` says so (Sync-Switch's online policy).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from policies.held import HeldState
from policies.membership import Membership
from policies.ops import Op, Program, ServerSpec, step_ops
from policies.phases import Phase, Progress, Timing
from policies.tensors import Buffer
from policies.view import ClusterView, ModelInfo


class SettingError(ValueError):
    """A policy setting does not fit the cluster; `field` names the setting."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message
        self.problems: list[tuple[str, str]] = [(field, message)]  # every bad setting, when there are several

    @classmethod
    def of(cls, problems: Sequence[tuple[str, str]]) -> SettingError:
        """One error carrying several (field, message) problems; it reads as the first."""
        error = cls(*problems[0])
        error.problems = list(problems)
        return error


class PolicySettings(BaseModel):
    """Base of a policy's settings: unknown keys, NaN/inf and type coercions (a YAML `true` read as 1)
    are errors. Plug-ins should derive from it; `registry.create` refuses non-finite values of any
    settings model all the same."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class NoSettings(PolicySettings):
    pass


@dataclass(frozen=True)
class Bucket:
    """A group of gradients that became ready together during backward (DDP-style)."""

    index: int  # 0 = first ready (the model's last layers)
    nbytes: float
    count: int  # buckets per step


class Policy:
    """Base class; subclasses set `name`, optionally `Settings`, and override the hooks they need."""

    name: ClassVar[str] = "policy"
    Settings: ClassVar[type[BaseModel]] = NoSettings
    # False: every worker runs the config's `iterations`. True: workers share iterations x workers
    # updates, so fast workers do more (asynchronous schemes; Sync-Switch counts ASP steps this way).
    shared_budget: ClassVar[bool] = False

    @property
    def host_symmetric(self) -> bool:
        """True when, bound, host k's ranks run host 0's programs with every rank shifted by k hosts'
        worth, and every group either holds some of host 0's ranks or lies on one host: the simulator
        may then run one host and copy it (sim/engine/symmetry.py). A single-phase policy only."""
        return False

    @property
    def one_input_pipeline(self) -> bool:
        """True when one client prepares every worker's batch (TensorFlow 1.x in-graph replication,
        as Tensor2Tensor's `--sync` runs it): the workers then share one host's input pipeline
        (`workload.input_samples_s`) instead of each host feeding its own GPUs."""
        return False

    def __init__(self, settings: BaseModel | None = None, **kwargs: Any) -> None:
        if settings is not None and kwargs:
            raise TypeError("pass either a Settings object or keyword settings, not both")
        self.settings = settings if settings is not None else self.Settings(**kwargs)
        self.view: ClusterView | None = None
        self.model: ModelInfo | None = None

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        """Plan against the cluster and model; raise `SettingError` when a setting does not fit."""
        self.view = view
        self.model = model

    @property
    def optimizer_share(self) -> float:
        """The share of the optimizer step each rank computes: 1 when every rank steps the whole model,
        1/g when it steps only its 1/g shard (sharded data parallelism)."""
        return 1.0

    def held_state(self) -> HeldState:
        """What a rank keeps of the model's state at its memory peak (sim/memory). Default: a whole replica,
        its gradients and optimizer state, flat gradient buckets of the gradient's bytes (DDP's), and a
        model-sized fp32 copy per buffer the policy declares (`buffers`)."""
        copies = sum(isinstance(b, Buffer) for b in self.buffers())
        return HeldState(buffer_bytes=self.bound_model.gradient_bytes, extra_copies=float(copies))

    @property
    def trains_replicas(self) -> bool:
        """Whether numerics mode and the real backend carry out this policy's ops on real tensors; False
        for a policy the simulator times but whose tensor rules are not written yet (refused there)."""
        return True

    def membership_problems(self, membership: Membership) -> list[tuple[str, str]]:
        """(field, message) for each change of `membership` (workers leaving or joining, the config's
        `faults.departures`) this policy cannot follow; the field is relative to `faults.`. Default: a
        policy that runs every rank at every step follows none."""
        if not membership.changes:
            return []
        return [
            (
                "departures",
                f"policy {self.name!r} runs every rank at every step; workers may leave and join only under "
                "local_sgd, diloco and policies derived from them",
            )
        ]

    def pinned_settings(self) -> dict[str, Any]:
        """The settings with every choice `bind` made from the cluster's figures written out (an `auto`
        resolved), so that a cluster of the same shape with other link speeds gets the same plan;
        calibration writes them when a measured figure would change the plan (docs/calibration.md).
        Default: the settings as given. Call after `bind`."""
        return self.settings.model_dump(mode="json", exclude_unset=True)

    def decisions(self) -> list[tuple[str, str, str]]:
        """(setting, value chosen, why) for each of its settings left `auto`, as `bind` resolved it
        (the simulator's decisions.csv). Default: the value `pinned_settings` writes out, else "auto"
        (decided op by op during the run); policies whose choice has a reason say it. Call after `bind`."""
        pinned = self.pinned_settings()
        rows = []
        for setting, value in self.settings.model_dump(mode="json").items():
            if value != "auto":
                continue
            chosen = pinned.get(setting, "auto")
            if chosen == "auto":
                rows.append((setting, "auto", "decided op by op during the run"))
            else:
                rows.append((setting, str(chosen), "resolved when the policy was bound to the cluster"))
        return rows

    def buffers(self) -> Sequence[Buffer]:
        """Model-sized tensors every worker keeps for this policy (`policies.tensors`; none by default).
        Backends allocate them when the run starts, from their `initial` value."""
        return ()

    @property
    def global_tensor(self) -> Optional[str]:
        """The buffer holding the model this policy considers the global one (DiLoCo's anchor after
        its outer step), which numerics mode evaluates; None: the mean of the replicas' parameters."""
        return None

    def servers(self) -> Sequence[ServerSpec]:
        """Parameter-server shards this policy needs the backend to run (none by default)."""
        return ()

    def begin_step(self, rank: int, step: int) -> Program:
        return ()

    def on_forward(self, rank: int, step: int, bucket: Bucket) -> Program:
        return ()

    def on_backward(self, rank: int, step: int, bucket: Bucket) -> Program:
        return ()

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        return ()

    def end_step(self, rank: int, step: int) -> Program:
        return ()

    # -- phases (policies.phases) -------------------------------------------------------------
    def next_phase(self, progress: Progress) -> Optional[Phase[Policy]]:
        """The phase to run next, or None when the run is over (default: one phase, the whole budget)."""
        if progress.phases:
            return None
        return Phase(self, progress.left, self.name)

    def observe(self, timing: Timing) -> None:
        """A worker finished an iteration of an adaptive phase (see policies.phases)."""

    def phase_over(self) -> bool:
        """Asked at the decision points of an adaptive phase: end the phase now?"""
        return False

    def phase_policies(self) -> Sequence[Policy]:
        """Every policy a phase of this one may run (backends plan their groups and shards up front)."""
        return (self,)

    def all_servers(self) -> Sequence[ServerSpec]:
        """The shards of whichever phase policy runs the most: a backend starts them once, and a
        phase uses shards 0..k-1 of them."""
        return max((list(p.servers()) for p in self.phase_policies()), key=len)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"policy {self.name!r} keeps no state, got keys {sorted(state)}")

    @property
    def bound_view(self) -> ClusterView:
        if self.view is None:
            raise RuntimeError(f"policy {self.name!r} used before bind(view, model)")
        return self.view

    @property
    def bound_model(self) -> ModelInfo:
        if self.model is None:
            raise RuntimeError(f"policy {self.name!r} used before bind(view, model)")
        return self.model

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.settings.model_dump().items())
        return f"{type(self).__name__}({fields})"


def step_hooks(policy: Policy, rank: int, step: int, buckets: Sequence[Bucket]) -> Iterator[tuple[str, int, Op]]:
    """(hook, bucket index or -1, op) of every op one rank's step issues, in the order a backend calls the
    hooks: begin_step, on_forward per bucket (last first), on_gradients per bucket, end_step. A dry run of
    the hooks (real/groups.py plans its process groups with it, sim/engine/policy_plans.py a plan)."""
    programs: list[tuple[str, int, Program]] = [("begin_step", -1, policy.begin_step(rank, step))]
    programs += [("on_forward", b.index, policy.on_forward(rank, step, b)) for b in buckets[::-1]]
    programs += [("on_gradients", b.index, policy.on_gradients(rank, step, b)) for b in buckets]
    programs.append(("end_step", -1, policy.end_step(rank, step)))
    for hook, bucket, program in programs:
        for item in program:
            for op in step_ops(item):
                yield hook, bucket, op
