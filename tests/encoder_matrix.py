"""Tiny random encoders of every family the installed transformers has, and how a packed row of texts compares
with the same texts padded: the matrix `tests/test_packed_encoders.py` asserts. `python tests/encoder_matrix.py`
prints it as a table (one row per family: exact, with the largest differences, or refused, with the message)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from varlen.datasets.text.collate import TextCollator
from varlen.models import packed_text
from varlen.models.packed_text import packed_logits

#: the encoder families the matrix covers (`config.model_type`), where transformers has them
FAMILIES = (
    "bert", "roberta", "xlm-roberta", "electra", "camembert", "albert", "distilbert", "modernbert",
    "deberta", "deberta-v2", "mpnet", "ibert", "longformer",
)  # fmt: skip
#: every text's tokens, the first one its [CLS]
LENGTHS = (5, 17, 9, 33, 2, 12, 3)
VOCAB, PAD, CLS = 99, 1, 2
#: the row's width (longer than the texts: a tail of padding)
WIDTH = 96

#: beyond the common tiny sizes, what a family needs (ModernBERT: a local window shorter than the texts)
EXTRA = {
    "albert": {"embedding_size": 16},
    "modernbert": {"local_attention": 8, "global_attn_every_n_layers": 2, "bos_token_id": CLS, "cls_token_id": CLS},
    "longformer": {"attention_window": [8, 8]},
}


def installed() -> list[str]:
    """The families of `FAMILIES` the installed transformers builds as sequence classifiers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as names

    return [kind for kind in FAMILIES if kind in names]


def tiny_encoder(kind: str, **overrides) -> torch.nn.Module:
    """A random sequence classifier of `kind` (hidden 32, 2 layers, 99 tokens, 3 classes), dropout off."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    sizes = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    sizes |= {"intermediate_size": 48, "max_position_embeddings": 80, "num_labels": 3, "pad_token_id": PAD}
    config = AutoConfig.for_model(kind, **(sizes | EXTRA.get(kind, {}) | overrides))
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config).eval()  # eval: dropout off


def samples() -> list[dict]:
    """The texts as the DataModule's samples: a [CLS] then ids clear of the special ones."""
    generator = torch.Generator().manual_seed(0)
    ids = [torch.cat([torch.tensor([CLS]), torch.randint(5, VOCAB, (n - 1,), generator=generator)]) for n in LENGTHS]
    return [{"input_ids": row.numpy(), "label": i % 3, "index": i} for i, row in enumerate(ids)]


def padded_logits(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """What `TextClassifier` computes on a padded batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def run(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and the gradients of their summed cross entropy, padded or packed."""
    model.zero_grad()
    logits = (packed_logits if "cu_seqlens" in batch else padded_logits)(model, batch)
    torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum").backward()
    return logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


class Row(NamedTuple):
    """A family's line of the matrix: the largest differences packed against padded, or why it is refused."""

    family: str
    logits: float | None = None  # max |packed - padded| logit
    gradients: float | None = None  # max |packed - padded| gradient, over every parameter
    alone: float | None = None  # max |logit among the others - logit alone|
    refusal: str | None = None


def compare(model: torch.nn.Module, name: str | None = None) -> Row:
    """`model`'s row: packed against padded (logits, gradients) and each text packed alone, or its refusal."""
    name = name or model.config.model_type
    pack = TextCollator(PAD, False, packing=(WIDTH, 0))
    try:
        b, grads_b = run(model, pack(samples()))
    except ValueError as error:
        return Row(name, refusal=str(error))
    a, grads_a = run(model, TextCollator(PAD, False)(samples()))
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10, name
    gradients = max(float((grads_a[k] - grads_b[k]).abs().max()) for k in grads_a)
    with torch.no_grad():
        alone = torch.cat([packed_logits(model, pack([sample])) for sample in samples()])
    return Row(name, float((a - b).abs().max()), gradients, float((alone - b).abs().max()))


def attention_calls(model: torch.nn.Module) -> int:
    """How often varlen's packed attention runs in one forward of `model` forced onto it (refusal bypassed):
    0 means the model computes attention itself, and a packed row's texts would attend to each other."""
    calls = []
    original = packed_text.packed_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    batch = TextCollator(PAD, False, packing=(WIDTH, 0))(samples())
    packed_text._register()
    config, before = model.config, model.config._attn_implementation
    packed_text.packed_attention, config._attn_implementation = counting, packed_text.ATTENTION
    try:
        cu, longest = batch["cu_seqlens"], batch["max_seqlen"]
        with torch.no_grad():
            model(
                input_ids=batch["input_ids"], position_ids=batch["position_ids"], cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                max_length_q=longest, max_length_k=longest, packed_tokens=batch["packed_tokens"],
            )  # fmt: skip
    except TypeError:  # its forward takes none of the interface's arguments
        pass
    finally:
        packed_text.packed_attention, config._attn_implementation = original, before
    return len(calls)


def matrix() -> list[Row]:
    """Every installed family's row, and ModernBERT's mean pooling."""
    rows = [compare(tiny_encoder(kind)) for kind in installed()]
    if "modernbert" in installed():
        rows.append(compare(tiny_encoder("modernbert", classifier_pooling="mean"), "modernbert (mean pooling)"))
    return rows


def table(rows: list[Row]) -> str:
    """The matrix as a markdown table."""
    head = "| family | packed | max logit diff | max gradient diff | alone vs among others |"
    lines = [head, "|---|---|---|---|---|"]
    for row in rows:
        if row.refusal is None:
            lines.append(f"| {row.family} | exact | {row.logits:.1e} | {row.gradients:.1e} | {row.alone:.1e} |")
        else:
            lines.append(f"| {row.family} | refused: {row.refusal} | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU")
    print(table(matrix()))
