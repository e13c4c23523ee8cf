"""Training data from several sources: shares per epoch, batches of one or several sources, counts
in the report and telemetry, equal lengths on every rank, exact elastic resume, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import binom
from toy import ToyModel, ToySequences, collate_toy

from varlen.batching.telemetry import PaddingTelemetry
from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.datasets.mixture import MixedFetch, MixtureCollator, SourceMixture, join_padded, share_weights
from varlen.errors import DataError


class TwoSources(VarLenDataModule):
    """Bring-your-own data: a `build` that returns its training split as a mapping of sources."""

    mask_keys = ("mask",)

    def __init__(self, source_weights=None, mix="within_batch", batch_size=None, max_tokens=None, seed=0) -> None:
        super().__init__(**base_args(locals()))
        self.collate_fn = collate_toy

    def train_sources(self) -> dict | ToySequences:
        return {"short": ToySequences(300, 1), "long": ToySequences(100, 3)}

    def build(self, stage):
        val = ToySequences(64, 2)
        return {"train": self.train_sources(), "val": val, "test": val}


def served_sources(dm, epochs, world_size: int = 1) -> list[np.ndarray]:
    """Per epoch, the source of every served sample (from the planned batches of every rank)."""
    mixture = dm.dataset("train")
    out = []
    for epoch in range(epochs):
        served = []
        for rank in range(world_size):
            sampler = dm.batch_sampler("train", True, num_replicas=world_size, rank=rank)
            sampler.set_epoch(epoch)
            served += [i for batch in sampler for i in batch]
        out.append(mixture.sources[np.asarray(served)])
    return out


# -- the dataset and its collate ------------------------------------------------------------------


def test_a_mixture_numbers_its_sources_one_after_the_other() -> None:
    a, b = ToySequences(5, 1), ToySequences(3, 2)
    mixture = SourceMixture({"a": a, "b": b})
    assert len(mixture) == 8 and mixture.counts() == {"a": 5, "b": 3}
    assert mixture.sources.tolist() == [0] * 5 + [1] * 3
    assert np.array_equal(mixture.lengths, np.concatenate([a.lengths, b.lengths]))
    sample = mixture[6]
    assert sample["index"] == 6 and np.array_equal(sample["ids"], b[1]["ids"])
    with pytest.raises(IndexError, match="index 8 is out of range for a mixture of 8"):
        mixture[8]


def test_a_batch_of_several_sources_is_joined_padded_with_the_mixtures_indices() -> None:
    mixture = SourceMixture({"a": ToySequences(5, 1), "b": ToySequences(3, 2)})
    one = mixture.__getitems__([6, 5])  # a single source: its fetch (here a list of samples)
    assert not isinstance(one, MixedFetch) and [s["index"] for s in one] == [6, 5]
    fetched = mixture.__getitems__([1, 6, 3])
    assert isinstance(fetched, MixedFetch) and len(fetched.parts) == 2
    batch = MixtureCollator(collate_toy)(fetched)
    assert sorted(batch["index"].tolist()) == [1, 3, 6]
    for row, i in enumerate(batch["index"].tolist()):
        ids = mixture[i]["ids"]
        assert batch["mask"][row].sum() == len(ids)
        assert batch["ids"][row, : len(ids)].tolist() == ids.tolist()
        assert not batch["ids"][row, len(ids) :].any()


def test_join_padded_pads_every_axis_and_refuses_what_it_cannot_join() -> None:
    from varlen.datasets.text.dataset import TextBatch

    def texts(width: int, rows: int) -> TextBatch:
        return TextBatch(torch.arange(rows), torch.ones(rows, width, dtype=torch.long),
                         torch.ones(rows, width, dtype=torch.bool), torch.zeros(rows, dtype=torch.long))  # fmt: skip

    joined = join_padded([texts(3, 2), texts(5, 1)])
    assert joined.ids.shape == (3, 5) and joined.mask.sum() == 2 * 3 + 5 and joined.type_ids is None
    assert joined.mask[:2, 3:].sum() == 0
    with pytest.raises(TypeError, match="concat"):
        join_padded([texts(3, 2), {"index": torch.arange(2)}])


def test_share_weights_give_each_source_its_share_and_keep_the_inner_weights() -> None:
    weights = share_weights([3, 1], [4, 2], [None, np.array([1.0, 3.0])])
    assert weights[:4].sum() == pytest.approx(0.75) and weights[4:].sum() == pytest.approx(0.25)
    assert weights[5] == pytest.approx(3 * weights[4])


# -- the generic form (a build that returns several training datasets) ----------------------------


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_served_shares_follow_the_source_weights_every_epoch(mix: str) -> None:
    dm = TwoSources(source_weights={"short": 1, "long": 3}, mix=mix, max_tokens=200)
    dm.setup("fit")
    n = len(dm.dataset("train"))
    low, high = binom.ppf([0.005, 0.995], n, 0.75) / n
    mixed = 0
    for epoch, sources in enumerate(served_sources(dm, 6)):
        assert len(sources) == n, epoch  # an epoch is as long as the mixture
        share = (sources == 1).mean()
        assert low <= share <= high, (epoch, share)
    for batch in dm.batch_sampler("train", True):
        kinds = set(dm.dataset("train").sources[batch].tolist())
        mixed += len(kinds) > 1
        assert sum(1 for _ in batch) * dm.dataset("train").lengths[batch].max() <= 200
    assert (mixed > 0) == (mix == "within_batch")


def test_without_source_weights_every_sample_of_every_source_is_served_once() -> None:
    dm = TwoSources(batch_size=16)
    dm.setup("fit")
    assert dm.train_weights() is None
    sampler = dm.batch_sampler("train", True)
    assert sorted(i for batch in sampler for i in batch) == list(range(400))


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_source_weights_at_the_natural_shares_serve_every_sample_once(mix: str) -> None:
    """A source served at most its size, its samples unweighted, is drawn without replacement: weights equal to
    the sources' natural shares serve all 300 and all 100 samples each epoch (issue 35: about two thirds were,
    every source being drawn with replacement)."""
    dm = TwoSources(source_weights={"short": 300, "long": 100}, mix=mix, max_tokens=200)
    dm.setup("fit")
    sampler = dm.batch_sampler("train", True)
    assert not sampler.draw.replacement.any()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        assert sorted(i for batch in sampler for i in batch) == list(range(400))


def test_a_source_weighted_past_its_size_repeats_and_the_other_does_not() -> None:
    """Halves of an epoch of 400: the long source (100 samples) serves 200, with replacement; the short one
    (300) serves 200 distinct samples."""
    dm = TwoSources(source_weights=[1, 1], max_tokens=200)
    dm.setup("fit")
    served = np.asarray([i for batch in dm.batch_sampler("train", True) for i in batch])
    sources = dm.dataset("train").sources[served]
    short, long = served[sources == 0], served[sources == 1]
    assert len(short) == len(long) == 200
    assert len(np.unique(short)) == 200 and len(np.unique(long)) < 100 + 1  # at most its 100, some repeated


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_every_rank_has_the_same_length_every_epoch(world_size: int, mix: str) -> None:
    dm = TwoSources(source_weights=[1, 1], mix=mix, max_tokens=150)
    dm.setup("fit")
    lengths = set()
    for epoch in range(3):
        for rank in range(world_size):
            sampler = dm.batch_sampler("train", True, num_replicas=world_size, rank=rank)
            sampler.set_epoch(epoch)
            lengths.add((len(sampler), len(list(sampler))))
    assert len(lengths) == 1 and lengths.pop()[0] > 0


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 3), (8, 3), (4, 1)])
def test_a_mixture_resumes_on_another_world_size_with_every_remaining_sample_once(before: int, after: int) -> None:
    dm = TwoSources(source_weights=[1, 2], mix="per_source", max_tokens=150)
    dm.setup("fit")
    samplers = [dm.batch_sampler("train", True, num_replicas=before, rank=r) for r in range(before)]
    planned = sorted(i for s in samplers for b in s for i in b)
    iterators = [iter(s) for s in samplers]
    served = [i for it in iterators for _ in range(2) for i in next(it)]
    state = samplers[0].state_dict()
    resumed = [dm.batch_sampler("train", True, num_replicas=after, rank=r) for r in range(after)]
    for sampler in resumed:
        sampler.load_state_dict(state)
    rest = [list(s) for s in resumed]
    assert len({len(batches) for batches in rest}) == 1
    assert sorted(served + [i for batches in rest for b in batches for i in b]) == planned


def test_a_fit_counts_what_each_source_served_in_the_report_and_the_telemetry() -> None:
    import lightning.pytorch as pl

    dm = TwoSources(source_weights=[1, 1], max_tokens=200)
    telemetry = PaddingTelemetry()
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[telemetry], num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(ToyModel(), datamodule=dm)
    planned = served_sources(dm, 2)
    for epoch in range(2):
        want = {"short": int((planned[epoch] == 0).sum()), "long": int((planned[epoch] == 1).sum())}
        assert dict(dm.report.served[epoch]) == want
        assert {k: telemetry.epochs[epoch][f"served_{k}"] for k in want} == want
    text = str(dm.report)
    assert "train sources: short 300 (asked 50% of each epoch, drawn 200 an epoch), long 100 (asked 50%" in text
    assert "served in epoch 1: short" in text


# -- scenarios: extra sources given as arguments ------------------------------------------------


@pytest.fixture(scope="module")
def text_mixture():
    from varlen.datamodules.text import TextClassificationDataModule

    def make(mix: str, **extra):
        dm = TextClassificationDataModule(
            synthetic_samples=400,
            max_length=128,
            max_tokens=2048,
            sources=[{"name": "long", "synthetic": "long_reviews", "synthetic_samples": 150}],
            mix=mix,
            **extra,
        )
        dm.prepare_data()
        dm.setup("fit")
        return dm

    return make


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_text_serves_its_sources_in_the_set_shares_and_batches_as_the_mix_says(text_mixture, mix: str) -> None:
    dm = text_mixture(mix, source_weights=[3, 1])
    mixture = dm.dataset("train")
    assert mixture.names == ["main", "long"] and mixture.counts() == {"main": 400, "long": 150}
    n = len(mixture)
    low, high = binom.ppf([0.005, 0.995], n, 0.25) / n
    for sources in served_sources(dm, 4):
        assert low <= (sources == 1).mean() <= high
    seen_mixed = False
    for batch in dm.train_dataloader():
        kinds = set(mixture.sources[batch["index"].numpy()].tolist())
        seen_mixed |= len(kinds) > 1
        assert mix == "within_batch" or len(kinds) == 1
        assert batch["input_ids"].numel() <= 2048
        lengths = mixture.lengths[batch["index"].numpy()]
        assert batch["attention_mask"].sum(1).tolist() == lengths.tolist()
    assert seen_mixed == (mix == "within_batch")
    # validation and test are main's; the long reviews' own held-out rows are counted, not lost
    assert len(dm.dataset("val")) == 80
    assert dm.report.unused("val split of source 'long'") == 30


def test_a_source_with_other_classes_or_bad_arguments_is_refused_naming_it() -> None:
    from varlen.datamodules.text import TextClassificationDataModule

    classes = TextClassificationDataModule(synthetic_samples=200).class_names
    dm = TextClassificationDataModule(synthetic_samples=200, sources=[{"name": "odd", "class_names": classes[::-1]}])
    with pytest.raises(DataError, match=f"source 'odd' has class_names=\\{classes[::-1]!r}"):
        dm.setup("fit")
    dm = TextClassificationDataModule(synthetic_samples=200, sources=[{"name": "odd", "class_names": ["a", "b"]}])
    with pytest.raises(DataError, match=r"source 'odd': synthetic train: row 1 \(label"):
        dm.setup("fit")
    with pytest.raises(ValueError, match="source 'odd' sets \\['no_such'\\]"):
        TextClassificationDataModule(sources=[{"name": "odd", "no_such": 1}]).setup("fit")
    with pytest.raises(ValueError, match="source 'x' sets \\['mix'\\]"):
        TextClassificationDataModule(sources=[{"name": "x", "mix": "per_source"}])
    with pytest.raises(ValueError, match="two sources are named 'main'"):
        TextClassificationDataModule(sources=[{"name": "main"}])


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1, 2, 3], "source_weights has 3 values but there are 2 sources"),
        ({"short": 1, "other": 1}, "missing: \\['long'\\]; unknown: \\['other'\\]"),
        ([1, -1], "must be a finite number >= 0"),
        ([0, 0], "all zero"),
        ([1, float("nan")], "must be a finite number >= 0"),
    ],
)
def test_bad_source_weights_are_refused_naming_the_problem(weights, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TwoSources(source_weights=weights).setup("fit")


def test_source_weights_without_sources_are_refused() -> None:
    class One(TwoSources):
        def train_sources(self) -> ToySequences:
            return ToySequences(300, 1)

    with pytest.raises(ValueError, match="source_weights need sources"):
        One(source_weights=[1]).setup("fit")


def test_molecule_batches_of_two_sources_are_the_graphs_of_their_samples() -> None:
    from varlen.datamodules.molecules import MoleculeDataModule
    from varlen.datasets.molecules.collate import MoleculeCollator

    dm = MoleculeDataModule(dataset="esol", sources=[{"name": "again", "split_seed": 1}], max_tokens=600)
    dm.prepare_data()
    dm.setup("fit")
    mixture = dm.dataset("train")
    plain = MoleculeCollator()
    batches = list(dm.train_dataloader())
    assert sorted(int(i) for b in batches for i in b.index) == list(range(len(mixture)))
    mixed = next(b for b in batches if len(set(mixture.sources[b.index.numpy()].tolist())) > 1)
    one_by_one = plain([mixture[int(i)] for i in mixed.index])
    for key in ("x", "edge_index", "edge_attr", "batch", "y", "y_mask", "index"):
        assert torch.equal(mixed[key], one_by_one[key]), key


def test_bearing_mixes_two_rigs_with_augmentation_and_one_recording_per_batch() -> None:
    from varlen.datamodules.bearing import BearingDataModule

    dm = BearingDataModule(sources=[{"name": "rig2", "seed": 1}], augment=True, grouping="recording", batch_size=16)
    dm.prepare_data()
    dm.setup("fit")
    mixture = dm.dataset("train")
    batches = list(dm.train_dataloader())
    assert sorted(int(i) for b in batches for i in b["index"]) == list(range(len(mixture)))
    for batch in batches:
        index = batch["index"].numpy()
        assert len(set(mixture.sources[index].tolist())) == 1
        assert len(set(batch["recording_ids"].tolist())) == 1


def test_a_source_has_its_own_data_arguments_and_inherits_the_others(tmp_path) -> None:
    from varlen.datamodules.text import TextClassificationDataModule

    rows = "\n".join(f"a {'good' if i % 2 else 'bad'} film number {i}\t{i % 2}" for i in range(40))
    (tmp_path / "main.tsv").write_text("sentence\tlabel\n" + rows + "\n")
    long = {"name": "long", "synthetic": "long_reviews", "synthetic_samples": 30}
    dm = TextClassificationDataModule(train_file=str(tmp_path / "main.tsv"), text_column="sentence", max_length=64,
                                      val_fraction=0.25, sources=[long])  # fmt: skip
    dm.prepare_data()
    dm.setup("fit")
    (source,) = dm.source_modules().values()
    assert source.train_file is None and source.synthetic == "long_reviews"  # not main's file
    assert source.max_length == 64 and source.columns.text == "text"  # inherited; the synthetic set's own column
    assert dm.dataset("train").counts() == {"main": 30, "long": 30}


def test_every_source_is_standardised_with_the_main_sources_statistics() -> None:
    from varlen.datamodules.bearing import BearingDataModule

    dm = BearingDataModule(sources=[{"name": "rig2", "seed": 1}], batch_size=16)
    dm.setup("fit")
    (source,) = dm.source_modules().values()
    for mine, theirs in zip(dm.normalization, source.dataset("train").normalization, strict=True):
        assert np.array_equal(mine, theirs)


def test_a_checkpoint_of_other_source_weights_warns_and_its_sampler_position_is_refused() -> None:
    saved = TwoSources(source_weights=[1, 1], max_tokens=200)
    saved.setup("fit")
    sampler = saved.batch_sampler("train", True)
    next(iter(sampler))
    dm = TwoSources(source_weights=[1, 3], max_tokens=200)
    dm.setup("fit")
    with pytest.warns(UserWarning, match="source_weights=\\[1.0, 1.0\\] \\(here \\[1.0, 3.0\\]\\)"):
        dm.load_state_dict(saved.state_dict())
    with pytest.raises(ValueError, match="other weights"):
        dm.batch_sampler("train", True).load_state_dict(sampler.state_dict())


# -- a small source's share (rounded per source, then per bucket inside it) ----------------------


class Sized(torch.utils.data.Dataset):
    """Token-like sizes only (lognormal, 1 to 512): what the sampler plans from."""

    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(rng.lognormal(4.5, 1.0, n), 1, 512).astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)


class BigAndSmall(TwoSources):
    def train_sources(self) -> dict:
        return {"big": Sized(20_000, 1), "small": Sized(400, 2)}


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
@pytest.mark.parametrize("share", [0.0005, 0.002, 0.01])
def test_a_small_sources_share_is_served_within_chance_of_the_request(mix: str, share: float) -> None:
    """Over 20 epochs the small source serves its share within a 99% binomial interval (rounding one
    largest-remainder pass over every source's buckets served 0 of 10.2 asked, or 34 of 40.8)."""
    dm = BigAndSmall(source_weights={"big": 1 - share, "small": share}, mix=mix, max_tokens=8192)
    dm.setup("fit")
    sampler = dm.batch_sampler("train", True)
    sources = dm.dataset("train").sources
    epochs = 20
    served = [int((sources[sampler.global_plan(epoch).order] == 1).sum()) for epoch in range(epochs)]
    n = len(dm.dataset("train")) * epochs
    low, high = binom.ppf([0.005, 0.995], n, share)
    assert low <= sum(served) <= high, (served, n * share)
    assert dm.report.sources["train"]["small"][1] == pytest.approx(share)
    drawn = dm.report.drawn["train"]  # what an epoch of the sampler draws of each source, not the plan's share
    if mix == "per_source":
        assert drawn["small"] == served[0] == served[-1] and drawn["small"] + drawn["big"] == n // epochs
        assert "small 400 (asked 0.05% of each epoch" in str(dm.report) or share != 0.0005
