"""The generic sequence model and the spectral transformer take packed batches (the samples' elements end to
end, with ``cu_seqlens``) through the one attention helper, with the padded batches' logits and gradients."""

from __future__ import annotations

import pytest
import torch

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
        model = SequenceModel(num_classes=3, feature_dim=4)
        values = torch.randn(len(LENGTHS), int(LENGTHS.max()), 4) * keep[..., None]
    else:
        model = SequenceModel(num_classes=3, vocab_size=50)
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
