"""Activation memory of one sample: the values forward leaves for backward, with and without activation
checkpointing.

Each layer saves `Layer.activation_values` values in the training type (2 bytes under fp16/bf16
autocast, else 4) and `saved_fp32` in FP32. Backward of a layer materializes gradients as large as what it
saved, or the `backward_fp32` values its builder counted, and the peak adds the largest of these once (a
language model's loss: autograd's cross-entropy is a log-softmax and a negative log-likelihood, whose
backward holds the saved log-probabilities, the gradient with respect to them, and the gradient with
respect to the logits, each a value per token and word of the vocabulary in FP32).

Under checkpointing (torch.utils.checkpoint around each block the model's builder marks: a transformer
layer), a block keeps only its input (what its first layer saves), and backward recomputes one block at a
time, holding that block's activations again. Under selective checkpointing a block keeps what
`Layer.selective_saved` says (torchtitan's op-level policy) and recomputes the rest of it, one block at a
time. Layers in no block (embeddings, the head) are not checkpointed; a model whose builder marks no
blocks saves what it saves without checkpointing.
"""

from __future__ import annotations

from collections import defaultdict

from sim.catalog.zoo.spec import ModelSpec

FP32_BYTES = 4
SIXTEEN_BIT = ("fp16", "bf16")


def activation_type_bytes(precision: str) -> int:
    """Bytes of one saved activation value under `workload.precision`."""
    return 2 if precision in SIXTEEN_BIT else FP32_BYTES


def activation_bytes_per_sample(spec: ModelSpec, precision: str, checkpointing: bool | str) -> float:
    """Peak bytes of activations per sample of a micro-batch (module text); `checkpointing`: False, True
    (every block) or "selective" (torchtitan's op-level policy inside every block)."""
    size = activation_type_bytes(precision)
    per_layer = [layer.activation_values * size + layer.saved_fp32 * FP32_BYTES for layer in spec.layers]
    transient = max(
        (layer.backward_fp32 * FP32_BYTES or saved for layer, saved in zip(spec.layers, per_layer)), default=0.0
    )
    if checkpointing is False:
        return sum(per_layer) + transient
    blocks: dict[int, list[tuple[float, float]]] = defaultdict(list)  # per block layer: (saved, kept)
    kept = 0.0
    for layer, saved in zip(spec.layers, per_layer):
        if layer.block < 0:
            kept += saved
        else:
            blocks[layer.block].append((saved, layer.selective_saved * size))
    if checkpointing == "selective":
        kept += sum(k for layers in blocks.values() for _, k in layers)
        recompute = max((sum(s - k for s, k in layers) for layers in blocks.values()), default=0.0)
    else:
        kept += sum(layers[0][0] for layers in blocks.values())  # each block's input
        recompute = max((sum(s for s, _ in layers) for layers in blocks.values()), default=0.0)
    return kept + recompute + transient
