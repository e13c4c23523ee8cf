"""Quiet output: what a user cannot act on stays out, what they can is said once, by varlen, at their line."""

from __future__ import annotations

import os
import sys
import warnings

import pytest

from varlen.datamodules.text import TextClassificationDataModule


@pytest.fixture(scope="module")
def text_dm():
    dm = TextClassificationDataModule(synthetic_samples=60, max_tokens=512)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_a_loader_says_nothing_of_torchs_set_vital(text_dm) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        next(iter(text_dm.train_dataloader()))
    assert not [w for w in caught if "set_vital" in str(w.message)]


def test_more_workers_than_cores_is_said_once_by_varlen_at_the_callers_line(text_dm) -> None:
    from varlen.batching import loader

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    loader._WORKERS_SAID.clear()
    text_dm.num_workers, text_dm.multiprocessing_context = cores + 3, "fork"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for make in (text_dm.train_dataloader, text_dm.val_dataloader):
                next(iter(make()))
    finally:
        text_dm.num_workers = 0
    said = [w for w in caught if "worker" in str(w.message).lower()]
    assert len(said) == 1, [str(w.message) for w in said]
    assert f"num_workers={cores + 3}" in str(said[0].message) and f"{cores} cores" in str(said[0].message)
    assert said[0].filename == __file__


def test_fit_help_prints_no_doubled_percent(monkeypatch, capsys) -> None:
    from varlen.cli import dispatch as cli

    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--help"])
    with pytest.raises(SystemExit):
        cli.console()
    out = capsys.readouterr().out
    assert "--data_wait" in out and "%%" not in out


def test_every_classifier_names_its_accuracy_and_macro_f1_alike() -> None:
    from varlen.models.bearing import BearingClassifier
    from varlen.models.sequence import SequenceModel
    from varlen.models.text import TextClassifier

    tiny = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    models = [BearingClassifier(num_classes=3, in_channels=1)]
    models.append(SequenceModel(num_classes=3, task="classification", input_field="values", feature_dim=1))
    models.append(TextClassifier(num_classes=3, pretrained=False, config_overrides=tiny))
    for model in models:
        assert set(model.val_metrics.keys()) >= {"val/accuracy", "val/macro_f1"}, type(model).__name__
