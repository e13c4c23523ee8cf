"""Packed text (`layout="packed"`): every batch one row of `T` tokens, the texts end to end with their
offsets and positions; the classifier's logits and gradients on it equal the padded batches' (fp32, CPU,
where the attention is the exact per-text fallback of the varlen kernel)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from varlen.datamodules.text import TextClassificationDataModule  # noqa: E402
from varlen.datasets.text.collate import TextCollator  # noqa: E402
from varlen.models import TextClassifier  # noqa: E402
from varlen.models.attention import Rows, packed_attention, rows_attention  # noqa: E402
from varlen.models.packed_text import check_packable, first_position  # noqa: E402

LENGTHS = [5, 17, 9, 33, 2, 12, 3]


def texts(pad_to: int = 0) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = [np.concatenate([[101], rng.integers(1000, 20000, n - 2), [102]]) for n in LENGTHS]
    return [{"input_ids": ids, "label": i % 3, "index": 10 + i} for i, ids in enumerate(rows)]


def both_layouts(width: int = 96) -> tuple[dict, dict]:
    samples = texts()
    return TextCollator(0, True)(samples), TextCollator(0, True, packing=(width, 0))(samples)


def roberta_dir(tmp_path):
    from transformers import RobertaConfig

    config = RobertaConfig(
        vocab_size=20_100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
    )  # fmt: skip
    config.save_pretrained(tmp_path / "roberta")
    return str(tmp_path / "roberta")


def models(tmp_path) -> dict[str, TextClassifier]:
    tiny = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96}
    torch.manual_seed(0)
    return {
        "pretrained MiniLM": TextClassifier(num_classes=3),
        "random 2-layer BERT": TextClassifier(num_classes=3, pretrained=False, config_overrides=tiny),
        "random 2-layer RoBERTa": TextClassifier(roberta_dir(tmp_path), num_classes=3, pretrained=False),
    }


def test_packed_batches_give_the_padded_logits_and_gradients_with_every_encoder(tmp_path) -> None:
    """Per text, the same logits and, summed over texts, the same gradients (1e-5 relative), for the pretrained
    MiniLM, a random 2-layer BERT and a random RoBERTa whose positions start at 2 (read from its config)."""
    for name, model in models(tmp_path).items():
        model.eval()  # dropout off: both layouts draw no masks
        offset = first_position(model.encoder.config)
        assert offset == (2 if "RoBERTa" in name else 0), name
        padded, packed = both_layouts()
        if offset:  # RoBERTa's padded path numbers positions itself, from the pad id + 1
            padded["input_ids"] = padded["input_ids"].masked_fill(~padded["attention_mask"].bool(), 1)
            packed["input_ids"] = packed["input_ids"].masked_fill(~packed["attention_mask"].bool(), 1)
        grads = []
        for batch in (padded, packed):
            model.zero_grad()
            logits = model(batch)
            torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum").backward()
            grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
            batch["logits"] = logits.detach()
        assert packed["logits"].shape == (len(LENGTHS), 3), name
        torch.testing.assert_close(packed["logits"], padded["logits"], rtol=1e-5, atol=1e-6, msg=name)
        assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
        for key, grad in grads[0].items():
            torch.testing.assert_close(grads[1][key], grad, rtol=1e-5, atol=1e-6, msg=f"{name}: {key}")


def test_a_text_packed_among_others_is_classified_as_alone(tmp_path) -> None:
    """Attention never crosses a text's end: a text's logits do not depend on the texts packed beside it."""
    model = models(tmp_path)["random 2-layer BERT"].eval()
    samples = texts()
    collate = TextCollator(0, True, packing=(96, 0))
    with torch.no_grad():
        together = model(collate(samples))
        alone = torch.cat([model(collate([sample])) for sample in samples])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


def test_packed_attention_is_rows_attention_and_a_dropout_keeps_the_exact_path() -> None:
    """The one helper: on CPU (and with dropout anywhere) the per-row SDPA, with the caller's scale."""
    torch.manual_seed(0)
    cu = torch.tensor([0, 3, 10, 11], dtype=torch.int32)
    q, k, v = torch.randn(3, 11, 2, 8).unbind(0)
    rows = Rows.of(cu)
    torch.testing.assert_close(packed_attention(q, k, v, cu, 7, scale=0.3), rows_attention(q, k, v, rows, 0.0, 0.3))
    one = torch.nn.functional.scaled_dot_product_attention(
        q[3:10].transpose(0, 1), k[3:10].transpose(0, 1), v[3:10].transpose(0, 1)
    ).transpose(0, 1)
    torch.testing.assert_close(packed_attention(q, k, v, cu, 7)[3:10], one)


def test_a_model_outside_transformers_attention_interface_is_refused_by_name() -> None:
    class Plain(torch.nn.Module):
        base_model = torch.nn.Module()
        classifier = torch.nn.Linear(4, 2)

    with pytest.raises(ValueError, match=r"cannot run Plain \(model_type None\): its attention never goes"):
        check_packable(Plain())


# -- the DataModule -------------------------------------------------------------------------------------


def packed_dm(**kwargs) -> TextClassificationDataModule:
    arguments = {"synthetic_samples": 300, "max_tokens": 512, "layout": "packed"} | kwargs
    dm = TextClassificationDataModule(**arguments)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def check_packed(batch: dict, width: int, lengths: np.ndarray) -> None:
    """One row of `width`; offsets, positions, mask and max_seqlen agree with the texts' lengths."""
    cu = batch["cu_seqlens"]
    assert batch["input_ids"].shape == batch["position_ids"].shape == batch["attention_mask"].shape == (1, width)
    assert cu.dtype == torch.int32 and len(cu) == len(batch["index"]) + 1 and int(cu[0]) == 0
    np.testing.assert_array_equal(np.diff(cu.numpy()), lengths)
    assert batch["packed_tokens"] == int(cu[-1]) <= width and batch["max_seqlen"] == lengths.max()
    assert batch["attention_mask"].sum() == cu[-1] and not batch["attention_mask"][0, int(cu[-1]) :].any()
    starts = batch["position_ids"][0, cu[:-1].long()]
    assert (starts == 0).all() and (batch["position_ids"][0, : int(cu[-1])] < lengths.max()).all()


def test_every_training_text_once_an_epoch_in_rows_of_one_shape_filled_to_the_budget() -> None:
    dm = packed_dm()
    sizes = dm.dataset("train").lengths
    seen: Counter = Counter()
    real = 0
    batches = list(dm.train_dataloader())
    for batch in batches:
        check_packed(batch, 512, sizes[batch["index"].numpy()])
        seen.update(batch["index"].tolist())
        real += int(batch["packed_tokens"])
    assert seen == Counter(range(len(sizes)))
    stats = dm.batch_stats(batches[0])  # what the epoch lines and the telemetry count
    assert stats.samples == len(batches[0]["index"]) > 1 and stats.padded == 512
    assert real / (512 * len(batches)) > 0.95  # best-fit: only the last rows are left short
    for batch in dm.val_dataloader():
        check_packed(batch, 512, dm.dataset("val").lengths[batch["index"].numpy()])


def test_the_row_is_max_tokens_wide_and_a_layout_is_checked() -> None:
    """`T` is `max_tokens` whatever `max_length` (a longer text is bad input: tests/test_packed_budgets.py);
    packed needs `max_tokens`."""
    assert packed_dm(max_tokens=64, max_length=128, synthetic_samples=60, on_bad="skip").packing == (64, 0)
    with pytest.raises(ValueError, match="layout='packed' needs max_tokens"):
        TextClassificationDataModule(synthetic_samples=60, layout="packed")
    with pytest.raises(ValueError, match="layout must be one of"):
        TextClassificationDataModule(synthetic_samples=60, max_tokens=512, layout="jagged")


def test_windows_are_packed_with_their_documents() -> None:
    dm = packed_dm(synthetic="long_reviews", max_length=48, overflow="windows", synthetic_samples=60)
    dataset = dm.dataset("train")
    batch = next(iter(dm.train_dataloader()))
    check_packed(batch, 512, dataset.lengths[batch["index"].numpy()])
    np.testing.assert_array_equal(batch["document_ids"].numpy(), dataset.documents[batch["index"].numpy()])


def test_a_mixtures_parts_share_one_row() -> None:
    dm = packed_dm(sources=[{"name": "long", "synthetic": "long_reviews", "synthetic_samples": 80}], mix="within_batch")
    mixture = dm.dataset("train")
    served = Counter()
    for batch in dm.train_dataloader():
        assert batch["input_ids"].shape == (1, 512) and int(batch["packed_tokens"]) <= 512
        served.update(batch["index"].tolist())
        assert len(batch["cu_seqlens"]) == len(batch["index"]) + 1
    assert sum(served.values()) == len(mixture)


def test_a_packed_fit_resumes_to_the_uninterrupted_runs_batches() -> None:
    first = packed_dm(seed=3)
    sampler = first.train_dataloader().batch_sampler
    order = [list(batch) for batch in sampler]
    again = packed_dm(seed=3).train_dataloader().batch_sampler
    batches = iter(again)
    for _ in range(4):
        next(batches)
    state = again.state_dict()
    resumed = packed_dm(seed=3).train_dataloader().batch_sampler
    resumed.load_state_dict(state)
    assert [list(batch) for batch in resumed] == order[4:]


def test_inspect_reports_one_shape_and_the_rows_fill() -> None:
    from varlen.cli.inspection import summarize

    summary = summarize(packed_dm(), "train")
    (shapes, filled), _ = summary.policy
    assert shapes == summary.shapes == 1 and summary.packed_row == 512
    assert summary.real / summary.allocated == pytest.approx(filled) and filled > 0.95
    assert summary.budget_use.max() <= 1.0
    assert f"packed: each batch one row of 512 tokens, filled {filled:.4f}" in "\n".join(summary.lines())
