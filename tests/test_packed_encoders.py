"""Packed text with every encoder family: exact (the padded batch's logits and gradients, a text among others
the same as alone) or refused by name before the first step, never a silent mix of texts. The matrix is
`tests/encoder_matrix.py` (`python tests/encoder_matrix.py` prints it); the docs' list is checked against it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from encoder_matrix import attention_calls, compare, installed, tiny_encoder  # noqa: E402

#: the families that must run packed exactly (issue 40), where transformers has them
EXACT = {"bert", "roberta", "xlm-roberta", "electra", "camembert", "albert", "distilbert", "modernbert"}
DOCS = Path(__file__).parents[1] / "docs" / "scenarios" / "text.md"
TOLERANCE = 1e-5


def cases() -> list[tuple[str, dict]]:
    found = [(kind, {}) for kind in installed()]
    return found + ([("modernbert", {"classifier_pooling": "mean"})] if "modernbert" in installed() else [])


@pytest.mark.parametrize(("kind", "overrides"), cases(), ids=lambda case: str(case or ""))
def test_every_family_is_exact_packed_or_refused_by_name(kind: str, overrides: dict) -> None:
    """The exact families: logits, gradients and a text alone vs among others within 1e-5 (fp32, CPU). The
    rest: one `ValueError` naming the family and `layout: padded`, and proof that the refusal is needed
    (forced onto the packed attention, the model never calls it: its texts would attend to each other)."""
    model = tiny_encoder(kind, **overrides)
    row = compare(model)
    if kind in EXACT:
        assert row.refusal is None, row.refusal
        assert max(row.logits, row.gradients, row.alone) <= TOLERANCE, row
        assert attention_calls(model) == model.config.num_hidden_layers  # once a layer, none elsewhere
    else:
        assert row.refusal is not None, f"{kind} ran packed: {row}"
        assert f"model_type '{kind}'" in row.refusal and "use layout: padded" in row.refusal
        assert attention_calls(model) == 0, f"{kind}'s attention now goes through the interface: check it packed"


def test_the_capability_list_is_the_matrix_and_the_docs_say_it() -> None:
    """`PACKED_FAMILIES` holds exactly the families held exact above, and the docs' list of packed families
    is the same list."""
    from varlen.models.packed_text import PACKED_FAMILIES

    assert set(PACKED_FAMILIES) == EXACT
    line = next(line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("Packed encoder"))
    assert re.findall(r"`([\w-]+)`", line) == sorted(PACKED_FAMILIES)


def test_a_family_with_the_attention_interface_is_refused_until_it_is_checked(monkeypatch) -> None:
    """Supporting transformers' attention interface is not enough: where the first token is read and the positions
    start must be known too; a decoder (causal attention) is refused as well."""
    from varlen.models import packed_text

    monkeypatch.delitem(packed_text.PACKED_FAMILIES, "electra")
    assert "has not checked" in compare(tiny_encoder("electra")).refusal
    assert "decoder" in compare(tiny_encoder("bert", is_decoder=True)).refusal


def roberta_dir(tmp_path: Path) -> str:
    config = tiny_encoder("roberta", vocab_size=30_522, max_position_embeddings=600, num_labels=2).config
    config.save_pretrained(tmp_path / "roberta")
    return str(tmp_path / "roberta")


def test_a_roberta_given_a_bert_tokenizer_numbers_its_own_positions(tmp_path) -> None:
    """Positions belong to the model: a RoBERTa trained on texts tokenised by the (BERT) MiniLM tokenizer gets
    RoBERTa's positions packed, so its packed logits equal its padded ones."""
    from varlen.datamodules.text import TextClassificationDataModule
    from varlen.models import TextClassifier

    def dm(layout: str) -> TextClassificationDataModule:
        module = TextClassificationDataModule(synthetic_samples=60, max_tokens=512, layout=layout)
        module.prepare_data()
        module.setup("fit")
        return module

    packed, padded = dm("packed"), dm("padded")
    model = TextClassifier(roberta_dir(tmp_path), num_classes=packed.num_classes, pretrained=False).eval()
    indices = list(range(6))
    with torch.no_grad():
        a = model(packed.collate_fn(packed.dataset("val").__getitems__(indices)))
        b = model(padded.collate_fn(padded.dataset("val").__getitems__(indices)))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_refused_encoder_stops_the_fit_before_the_first_step(tmp_path, monkeypatch) -> None:
    """MPNet with a packed DataModule: the fit ends in the one `ValueError` at setup; no batch reaches it."""
    import lightning.pytorch as pl

    from varlen.datamodules.text import TextClassificationDataModule
    from varlen.models import TextClassifier, text

    def reached(*args):
        raise AssertionError("a packed batch reached the model")

    monkeypatch.setattr(text, "packed_logits", reached)
    tiny_encoder("mpnet", vocab_size=30_522, num_labels=2).config.save_pretrained(tmp_path / "mpnet")
    dm = TextClassificationDataModule(synthetic_samples=60, max_tokens=512, layout="packed")
    model = TextClassifier(str(tmp_path / "mpnet"), num_classes=2, pretrained=False)
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"MPNetForSequenceClassification \(model_type 'mpnet'\).*use layout: padded"):
        trainer.fit(model, datamodule=dm)
