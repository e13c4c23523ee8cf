"""The generic sequence model and the spectral transformer take packed batches (the samples' elements end to
end, with `cu_seqlens`) through the one attention helper, with the padded batches' logits and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from varlen.datamodules.sequence import SequenceDataModule
from varlen.models.hyperspectral import SpectralTransformer
from varlen.models.sequence import SequenceModel

LENGTHS = torch.tensor([3, 11, 1, 7, 5])


def keep_mask() -> torch.Tensor:
    return torch.arange(int(LENGTHS.max()))[None, :] < LENGTHS[:, None]


def cu_seqlens() -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int32), LENGTHS.cumsum(0).to(torch.int32)])


def same_logits_and_gradients(model: torch.nn.Module, padded: dict, packed: dict) -> None:
    model.eval()  # dropout off: the two layouts draw no masks
    grads, logits = [], []
    for batch in (padded, packed):
        model.zero_grad()
        out = model(batch)
        torch.nn.functional.cross_entropy(out, batch["labels"], reduction="sum").backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        logits.append(out.detach())
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-6)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 5
    for key, grad in grads[0].items():
        torch.testing.assert_close(grads[1][key], grad, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("kind", ["features", "token ids"])
def test_the_sequence_model_packed_equals_padded(kind: str) -> None:
    torch.manual_seed(0)
    keep = keep_mask()
    if kind == "features":
        model = SequenceModel(num_classes=3, task="classification", input_field="values", feature_dim=4)
        values = torch.randn(len(LENGTHS), int(LENGTHS.max()), 4) * keep[..., None]
    else:
        model = SequenceModel(num_classes=3, task="classification", input_field="values", vocab_size=50)
        values = torch.randint(1, 50, keep.shape) * keep
    labels, index = torch.tensor([0, 1, 2, 1, 0]), torch.arange(len(LENGTHS))
    padded = {"values": values, "values_mask": keep, "labels": labels, "index": index}
    packed = {"values": values[keep], "values_cu_seqlens": cu_seqlens(), "labels": labels, "index": index}
    same_logits_and_gradients(model, padded, packed)


@pytest.mark.parametrize("patch", [0, 3])
def test_the_spectral_transformer_packed_equals_padded(patch: int) -> None:
    torch.manual_seed(0)
    keep = keep_mask()
    shape = (len(LENGTHS), int(LENGTHS.max()), *((patch, patch) if patch else ()))
    spectra = torch.rand(shape) * keep.reshape(*keep.shape, *([1] * (len(shape) - 2)))
    wavelengths = (400 + 10 * torch.arange(int(LENGTHS.max())))[None].expand_as(keep) * keep
    labels, index = torch.tensor([0, 1, 2, 1, 0]), torch.arange(len(LENGTHS))
    model = SpectralTransformer(num_classes=3)
    padded = {"spectra": spectra, "wavelengths": wavelengths, "band_mask": keep, "labels": labels, "index": index}
    packed = {
        "spectra": spectra[keep], "wavelengths": wavelengths[keep], "band_cu_seqlens": cu_seqlens(),
        "labels": labels, "index": index,
    }  # fmt: skip
    same_logits_and_gradients(model, padded, packed)


# -- SequenceDataModule(layout="packed"): token ids end to end ------------------------------------------


def token_table(count: int = 120) -> dict:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, count)
    return {
        "tokens": [rng.integers(1, 50, n).astype(np.int64) for n in lengths],
        "label": [int(n % 3) for n in lengths],
    }


def sequence_dm(layout: str, **kwargs) -> SequenceDataModule:
    dm = SequenceDataModule(train=token_table(), max_tokens=128, layout=layout, val_fraction=0.2, **kwargs)
    dm.setup("fit")
    return dm


def test_a_packed_sequence_epoch_serves_every_sample_once_in_rows_of_one_shape() -> None:
    dm = sequence_dm("packed")
    dataset = dm.dataset("train")
    served = []
    for batch in dm.train_dataloader():
        cu, lengths = batch["tokens_cu_seqlens"], dataset.lengths[batch["index"].numpy()]
        assert batch["tokens"].shape == batch["tokens_mask"].shape == (128,) and batch["tokens"].dtype == torch.int64
        np.testing.assert_array_equal(np.diff(cu.numpy()), lengths)
        assert int(batch["tokens_mask"].sum()) == int(cu[-1]) and not batch["tokens"][int(cu[-1]) :].any()
        rows = [dataset[int(i)]["tokens"] for i in batch["index"]]
        np.testing.assert_array_equal(batch["tokens"][: int(cu[-1])].numpy(), np.concatenate(rows))
        served.extend(batch["index"].tolist())
    assert sorted(served) == list(range(len(dataset)))
    single = dm.collate_fn([dataset[int(i)] for i in batch["index"]])  # single samples pack the same
    assert all(torch.equal(single[k], batch[k]) for k in ("tokens", "tokens_cu_seqlens", "tokens_mask", "labels"))


def test_the_sequence_model_reads_packed_rows_as_padded_batches() -> None:
    packed, padded = sequence_dm("packed"), sequence_dm("padded")
    torch.manual_seed(0)
    model = SequenceModel(
        num_classes=packed.num_classes, task="classification", vocab_size=packed.vocab_size, input_field="tokens"
    ).eval()
    fits = np.cumsum(packed.dataset("val").lengths) <= 128  # as many as one row holds
    indices = list(range(int(fits.sum())))
    assert len(indices) > 3
    with torch.no_grad():
        a = model(packed.dataset("val").__getitems__(indices))
        b = model(padded.dataset("val").__getitems__(indices))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_packed_sequence_layout_is_checked() -> None:
    with pytest.raises(ValueError, match="layout='packed' needs max_tokens"):
        SequenceDataModule(train=token_table(), layout="packed")
    with pytest.raises(ValueError, match="layout must be 'padded' or 'packed'"):
        SequenceDataModule(train=token_table(), max_tokens=128, layout="jagged")
    two = token_table() | {"more": token_table()["tokens"]}
    with pytest.raises(ValueError, match="lays one variable-length field"):
        SequenceDataModule(train=two, max_tokens=128, layout="packed", size_field="tokens")


def first_half(sample: dict) -> dict:
    return sample | {"tokens": sample["tokens"][: max(1, len(sample["tokens"]) // 2)]}


def test_a_transformed_training_batch_is_packed_after_its_transform() -> None:
    dm = sequence_dm("packed", transform=first_half)
    dataset = dm.dataset("train")
    batch = next(iter(dm.train_dataloader()))
    halves = [max(1, int(n) // 2) for n in dataset.lengths[batch["index"].numpy()]]
    np.testing.assert_array_equal(np.diff(batch["tokens_cu_seqlens"].numpy()), halves)
    assert batch["tokens"].shape == (128,) and int(batch["tokens_mask"].sum()) == sum(halves)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_packed_encoder_equals_the_padded_encoder_pre_and_post_norm(norm_first: bool) -> None:
    """`packed_encoder` over torch's `nn.TransformerEncoder`: the padded encoder's output on the real
    positions, for pre-norm layers and for post-norm ones (torch's default)."""
    from varlen.models.attention import Rows, packed_encoder

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    keep = keep_mask()
    x = torch.randn(len(LENGTHS), int(LENGTHS.max()), 16)
    padded = encoder(x, src_key_padding_mask=~keep)[keep]
    packed = packed_encoder(encoder, x[keep], Rows.of(cu_seqlens()))
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
