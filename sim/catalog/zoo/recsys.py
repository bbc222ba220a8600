"""DeepFM (Guo et al. 2017) on the Criteo display-advertising data.

Criteo has 13 integer and 26 categorical fields. As in the LIBSVM-format release of the Kaggle
2014 data (Juan et al.'s field-aware FM preprocessing: integers discretised, every field's value
hashed into one space), all 39 fields share a hashed space of 10^6 feature ids. One sample
activates one id per field, so the tables' gradients are very sparse: 39 rows out of a million.
"""

from __future__ import annotations

from sim.catalog.zoo.builders import RELU_FLOPS, embedding, linear, plus_flops
from sim.catalog.zoo.spec import Layer, Lookup, ModelSpec, Op

CRITEO_DENSE_FIELDS = 13
CRITEO_CATEGORICAL_FIELDS = 26
CRITEO_HASHED_FEATURES = 1_000_000
DEEPFM_EMBEDDING_DIM = 10
DEEPFM_HIDDEN = (400, 400, 400)
# Categorical values are long-tailed: a few ids take most lookups. The exponent is an assumption
# (the skew Zen's balance claim is tested at); hashing scatters the popular ids over the space.
CRITEO_ZIPF_S = 1.1


def deepfm_layers(
    *,
    fields: int = CRITEO_DENSE_FIELDS + CRITEO_CATEGORICAL_FIELDS,
    features: int = CRITEO_HASHED_FEATURES,
    dim: int = DEEPFM_EMBEDDING_DIM,
    hidden: tuple[int, ...] = DEEPFM_HIDDEN,
) -> tuple[Layer, ...]:
    """FM first-order weights, the shared embedding table, then the DNN on all fields."""
    # First-order term: one scalar weight per feature id plus a global bias; summing the 39
    # looked-up weights costs about one add each.
    # Its gradient holds the looked-up ids' weights (the bias's one value is left out of the sparsity).
    lookup = Lookup(
        per_sample=fields,
        zipf_s=CRITEO_ZIPF_S,
        hot_rows="scattered",
        space=features,
        source="one hashed id per field and sample (39 fields)",
    )
    gather_sum = (Op("lookup", float(fields), 2.0 * fields, 2),)  # gather the weights, sum them
    first_order = Layer(
        "fm.linear",
        features + 1,
        float(fields),
        rows=features + 1,
        lookup=lookup,
        ops=gather_sum,
        shapes=((features, 1), (1,)),  # a weight per feature id, then the global bias
    )
    # Second-order term with Rendle's O(k*n) identity: 0.5 * sum_f[(sum_i v_if)^2 - sum_i v_if^2]
    # costs about 3 FLOPs per looked-up element plus a few per dimension; it is parameter-free
    # beyond the table, so it is folded into it.
    fm_pairwise = 3 * fields * dim + 4 * dim
    layers = [
        first_order,
        plus_flops(embedding("embedding", features, dim, lookup), fm_pairwise, moved=2 * fields * dim, kernels=4),
    ]
    width = fields * dim
    for i, out in enumerate(hidden):
        layers.append(plus_flops(linear(f"dnn.{i}", width, out), RELU_FLOPS * out, moved=2 * out))
        width = out
    # The output unit; adding the FM and DNN logits and the sigmoid are folded in.
    layers.append(plus_flops(linear("dnn.out", width, 1), 4, moved=4, kernels=3))
    return tuple(layers)


def deepfm() -> ModelSpec:
    return ModelSpec(
        name="deepfm",
        layers=deepfm_layers(),
        source=(
            "Guo et al. 2017 (arXiv:1703.04247), embedding dim 10, DNN 400-400-400; "
            "Criteo with 39 fields hashed into 10^6 ids (LIBSVM criteo release)"
        ),
        sample="one Criteo example (13 dense + 26 categorical fields)",
    )
