"""The `workload.sparsity:` config section: which gradients are sparse, and how (docs/sparse.md).

Embedding tables of zoo models are sparse by their access pattern (`sim.catalog.zoo.spec.Lookup`); top-k
sparsification makes the other tensors sparse too. Sparse synchronization policies (`zen`,
`sparse_allgather`, `sparse_ps`) move only the non-zero rows; dense ones move everything. With `lookups` every
synthetic layer is a table, so the settings for tables as dense and for the other tensors are refused beside it.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field, model_validator

from sim.config.types import Fraction, Share, Strict


class SparsityConfig(Strict):
    """Which gradients are sparse: embedding tables by their lookups, other tensors by top-k (docs/sparse.md)."""

    embeddings: bool = Field(
        True,
        description="embedding tables get gradients only in the rows a batch looked up; false: treat them as dense",
    )
    zipf_s: Optional[Annotated[float, Field(ge=0, le=4)]] = Field(
        None, description="skew of looked-up ids (power-law exponent, 0 = uniform); default: each table's own"
    )
    hot_rows: Optional[Literal["first", "scattered"]] = Field(
        None, description="where popular ids sit: first (ids by frequency) or scattered (hashed); default: the table's"
    )
    topk: Optional[Fraction] = Field(
        None,
        description="sparsify every other gradient tensor to this density by top-k with error feedback (0.01 = 1%)",
    )
    topk_overlap: Share = Field(
        0.0, description="share of each worker's top-k positions that every worker selects in the same iteration"
    )
    dense_below: Annotated[int, Field(ge=0, lt=2**40)] = Field(
        4096, description="tensors of at most this many elements stay dense (as Zen's sparsifier keeps them)"
    )
    lookups: Optional[Annotated[int, Field(ge=1, le=100_000_000)]] = Field(
        None,
        description="synthetic only: ids each worker looks up per iteration in every synthetic layer, which then "
        "is an embedding table of embedding_dim-wide rows",
    )
    embedding_dim: Annotated[int, Field(ge=1, le=65_536)] = Field(
        1, description="synthetic only, with lookups: values per row"
    )

    @model_validator(mode="after")
    def _nothing_lookups_leaves_without_effect(self) -> SparsityConfig:
        """`lookups` makes every synthetic layer an embedding table: no tensor is left for top-k, and
        treating tables as dense would undo what it asks for. Every such setting is one line."""
        if self.lookups is None:
            return self
        problems = []
        if not self.embeddings:
            problems.append(
                "embeddings: false treats embedding tables as dense, but sparsity.lookups makes every synthetic "
                "layer a sparse table; remove one of the two"
            )
        if self.topk is not None:
            problems.append(
                "topk: sparsifies the tensors that are not embedding tables, and sparsity.lookups makes every "
                "synthetic layer a table; remove one of the two"
            )
        for name in ("topk_overlap", "dense_below"):
            if name in self.model_fields_set:
                problems.append(
                    f"{name}: applies only to top-k of the tensors that are not tables, and sparsity.lookups makes "
                    "every synthetic layer a table; remove it"
                )
        if problems:
            raise ValueError("\n".join(problems))
        return self
