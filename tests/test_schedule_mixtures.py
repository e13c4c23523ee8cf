"""Mixture schedules in memory: each epoch draws with its stage's shares and has its own length (Lightning
reloads the loader every epoch), every rank agrees, every resume is exact, and the report, telemetry and
`varlen inspect` show each stage's served share against its scheduled one."""

from __future__ import annotations

import logging
import os
import pickle
import re
from collections import Counter

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binom
from toy import ToyModel, collate_toy

from varlen.batching import BucketBatchSampler
from varlen.batching.schedule import MixtureSchedule
from varlen.batching.schedule_draws import ScheduledWeights
from varlen.batching.telemetry import PaddingTelemetry
from varlen.cli.inspection import summarize
from varlen.datamodules.base import VarLenDataModule, base_args

NAMES = ("a", "b", "c")
#: examples per property (SCHED_EXAMPLES=400 for a longer search)
EXAMPLES = int(os.environ.get("SCHED_EXAMPLES", 0))


def sampler_of(value, sizes, sources, world: int = 1, rank: int = 0, **extra) -> BucketBatchSampler:
    """A training sampler whose sources' shares follow `value` (samples of source s: `sources == s`)."""
    schedule = MixtureSchedule.parse(value, NAMES[: int(sources.max()) + 1], "test")
    weights = ScheduledWeights.build(schedule, sources, None)
    return BucketBatchSampler(sizes, max_tokens=200, weights=weights, shares=sources, num_replicas=world, rank=rank,
                              **extra)  # fmt: skip


def epoch_of(samplers: list[BucketBatchSampler], epoch: int) -> list[list[list[int]]]:
    """Every rank's batches of `epoch` (each checked to be as many as its `len()` said)."""
    out = []
    for sampler in samplers:
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler), (epoch, sampler.rank)
        out.append(batches)
    return out


def data(seed: int, counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sources = np.repeat(np.arange(len(counts)), counts)
    return rng.integers(1, 60, len(sources)), sources


# -- the sampler --------------------------------------------------------------------------------------


@st.composite
def schedules(draw, sources: int):
    unit = draw(st.sampled_from(["until_epoch", "until_step"]))
    stages, end = [], 0
    for _ in range(draw(st.integers(1, 3))):
        weights = draw(st.lists(st.integers(0, 5), min_size=sources, max_size=sources))
        weights[draw(st.integers(0, sources - 1))] += 1  # not all zero
        end += draw(st.integers(1, 2) if unit == "until_epoch" else st.integers(1, 30))
        stages.append({"weights": weights, unit: end})
    if draw(st.booleans()):
        del stages[-1][unit]  # the last stage holds to the end
    return {"stages": stages, "interpolate": draw(st.sampled_from(["step", "linear"]))}


@settings(max_examples=EXAMPLES or 25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    counts=st.lists(st.integers(15, 150), min_size=2, max_size=3),
    world=st.sampled_from([1, 2, 3, 8]),
    data_=st.data(),
)
def test_every_epoch_serves_its_stages_shares_in_equal_counts_on_every_rank(seed, counts, world, data_) -> None:
    """Per epoch: every rank serves `len()` batches, the same count; the shares are the schedule's at the
    epoch's first position, counted here from the served epochs (steps: batches per rank of the earlier
    epochs); an epoch no stage ends inside serves every source its share within one sample, and one a stage
    ends inside changes shares at that step: each piece serves no source its stage gives no share."""
    value = data_.draw(schedules(len(counts)))
    sizes, sources = data(seed, counts)
    schedule = MixtureSchedule.parse(value, NAMES[: len(counts)], "test")
    samplers = [sampler_of(value, sizes, sources, world, rank) for rank in range(world)]
    steps = 0
    for epoch in range(4):
        ranks = epoch_of(samplers, epoch)
        assert len({len(batches) for batches in ranks}) == 1
        length = len(ranks[0])
        asked = schedule.shares_at(epoch if schedule.unit == "epoch" else steps)
        np.testing.assert_allclose(samplers[0].shares_of(epoch), asked)
        ends = [] if schedule.unit == "epoch" else [s.until - steps for s in schedule.stages if s.until]
        cuts = [0, *sorted(k for k in ends if 0 < k < length), length]
        for start, stop in zip(cuts[:-1], cuts[1:], strict=False):
            served = np.asarray([i for batches in ranks for batch in batches[start:stop] for i in batch])
            shares = schedule.shares_at(epoch if schedule.unit == "epoch" else steps + start)
            got = np.bincount(sources[served], minlength=len(counts))
            assert not got[shares == 0].any(), (epoch, start, got, shares)
            if len(cuts) == 2:  # one piece: the whole draw
                assert len(served) == len(sizes) and np.all(np.abs(got - shares * len(sizes)) <= 1), (epoch, got)
        steps += length


@settings(max_examples=EXAMPLES or 20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    counts=st.lists(st.integers(15, 120), min_size=2, max_size=3),
    worlds=st.tuples(st.sampled_from([1, 2, 3, 8]), st.sampled_from([1, 2, 3, 8])),
    data_=st.data(),
)
def test_a_resume_anywhere_on_any_world_size_serves_what_the_uninterrupted_run_does(seed, counts, worlds, data_):
    """Saved after `k` batches of epoch `e` on W ranks, loaded on W' ranks: the rest of the epoch is every
    sample the W-rank epoch had not served (drawn with its W-rank shares; the very batches on W' = W), equal
    counts on every rank; the next epoch, or an epoch not begun, is the W'-rank run's own."""
    value = data_.draw(schedules(len(counts)))
    sizes, sources = data(seed, counts)
    before, after = worlds
    epoch = data_.draw(st.integers(0, 3))
    saved = [sampler_of(value, sizes, sources, before, rank) for rank in range(before)]
    whole = epoch_of(saved, epoch)
    k = data_.draw(st.integers(0, len(whole[0])))
    for sampler in saved:
        sampler.set_epoch(epoch)
        batches = iter(sampler)
        for _ in range(k):
            next(batches)
    state = saved[0].state_dict()
    resumed = [sampler_of(value, sizes, sources, after, rank) for rank in range(after)]
    for sampler in resumed:
        sampler.load_state_dict(state)
    lengths = [len(sampler) for sampler in resumed]  # what Lightning reads: the epoch's, served part included
    rest = [list(sampler) for sampler in resumed]
    assert len({len(batches) for batches in rest}) == 1
    if k in (0, len(whole[0])):  # an epoch not begun, or finished: the W'-rank run's own, from its start
        # (under until_step, at the step the W-rank run reached: the trainer's steps are what it took)
        ended = {"epoch": epoch + (k > 0)} | (
            {"steps_before": state["steps_before"] + k} if "steps_before" in state else {}
        )
        fresh = [sampler_of(value, sizes, sources, after, rank, **ended) for rank in range(after)]
        assert rest == epoch_of(fresh, epoch + (k > 0)) and lengths == [len(batches) for batches in rest]
        return
    assert lengths == [k + len(batches) for batches in rest]
    if before == after:
        assert rest == [batches[k:] for batches in whole]
    first = Counter(i for batches in whole for batch in batches[:k] for i in batch)
    later = Counter(i for batches in rest for batch in batches for i in batch)
    planned = Counter(i for batches in whole for batch in batches for i in batch)
    # nothing missing; where fewer samples are left than ranks, a few repeat (fewer than the ranks, warned)
    assert not planned - (first + later)
    assert set(first + later - planned) <= set(later) and (first + later).total() - planned.total() < after
    ended = {"epoch": epoch + 1}
    if "steps_before" in state:  # steps: the next epoch starts where the resumed one ends (what was trained)
        ended["steps_before"] = state["steps_before"] + lengths[0]
    fresh = [sampler_of(value, sizes, sources, after, r, **ended) for r in range(after)]
    assert epoch_of(resumed, epoch + 1) == epoch_of(fresh, epoch + 1)


def test_until_step_counts_the_plans_batches_per_rank_so_the_stage_moves_by_world_size() -> None:
    """Steps are the plan's batches per rank: on 1 rank an epoch is ~4 times as many steps as on 4 ranks, so
    a stage of 100 steps ends after fewer epochs; the shares change at the first epoch starting past it."""
    sizes, sources = data(0, [300, 300])
    value = [{"weights": [1, 0], "until_step": 100}, {"weights": [0, 1]}]
    for world in (1, 4):
        sampler = sampler_of(value, sizes, sources, world)
        lengths = []
        for epoch in range(6):
            sampler.set_epoch(epoch)
            lengths.append(len(sampler))
        starts = np.cumsum([0, *lengths[:-1]])
        want = [0 if start < 100 else 1 for start in starts]
        assert [sampler.stage_of(e) for e in range(6)] == want
        assert [sampler.scheduled.steps_before(e, world) for e in range(6)] == starts.tolist()
        assert want.index(1) == int(np.argmax(starts >= 100))
    assert sampler_of(value, sizes, sources, 1).stage_of(2) != sampler_of(value, sizes, sources, 4).stage_of(2)


@pytest.mark.parametrize("mix_groups", [False, True])
@pytest.mark.parametrize("small", [0.01, 0.03])
def test_a_source_down_to_one_percent_gets_its_stage_share_every_epoch(mix_groups: bool, small: float) -> None:
    """Within one sample of the stage's share every epoch (so within the 99% binomial interval)."""
    sizes, sources = data(1, [2000, 300, 200])
    value = [{"weights": [1 - small, small, 0], "until_epoch": 2}, {"weights": [0.5, 0.5 - small, small]}]
    groups = sources if mix_groups else None  # per_source: each batch one source's
    sampler = sampler_of(value, sizes, sources, groups=groups)
    n = len(sizes)
    for epoch in range(4):
        shares = sampler.shares_of(epoch)
        order = sampler.global_plan(epoch).order
        got = np.bincount(sources[order], minlength=3)
        assert np.all(np.abs(got - shares * n) <= 1), (epoch, got)
        asked = shares > 0
        low, high = binom.ppf(0.005, n, shares[asked]), binom.ppf(0.995, n, shares[asked])
        assert np.all((low <= got[asked]) & (got[asked] <= high)) and not got[~asked].any()
        if groups is not None:
            assert all(len(set(sources[order[a:b]])) == 1 for a, b in sampler.global_plan(epoch).bounds)


def test_a_state_of_another_schedule_is_refused_naming_both() -> None:
    """Inside its epoch (at its start, the epoch starts with the new schedule's shares)."""
    sizes, sources = data(0, [100, 100])
    one = [{"weights": [3, 1], "until_epoch": 1}, {"weights": [1, 1]}]
    saved = sampler_of(one, sizes, sources)
    next(iter(saved))
    state = saved.state_dict()
    other = [{"weights": [3, 1], "until_epoch": 2}, {"weights": [1, 1]}]
    said = "saved with schedule 'until epoch 1: a 0.75, b 0.25; then: a 0.5, b 0.5' of source_weights, this "
    with pytest.raises(ValueError, match=said + "sampler has schedule 'until epoch 2"):
        sampler_of(other, sizes, sources).load_state_dict(state)
    plain = BucketBatchSampler(sizes, max_tokens=200, weights=np.ones(200), shares=sources)
    with pytest.raises(ValueError, match="this sampler has no schedule"):
        plain.load_state_dict(state)
    linear = {"stages": one, "interpolate": "linear"}
    with pytest.raises(ValueError, match=r"this sampler has schedule '.*\(linear between stages\)'"):
        sampler_of(linear, sizes, sources).load_state_dict(state)


# -- the DataModule ----------------------------------------------------------------------------------


class Lengths(torch.utils.data.Dataset):
    """Samples of `low .. high - 1` tokens: short and long sources make epochs of different lengths."""

    def __init__(self, n: int, low: int, high: int, seed: int) -> None:
        self.lengths = np.random.default_rng(seed).integers(low, high, n)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "ids": np.arange(self.lengths[i]) % 9 + 1, "label": int(i % 2)}


class ShortAndLong(VarLenDataModule):
    mask_keys = ("mask",)

    def __init__(self, source_weights=None, mix="within_batch", batch_size=None, max_tokens=200, seed=0) -> None:
        super().__init__(**base_args(locals()))
        self.collate_fn = collate_toy

    def build(self, stage):
        val = Lengths(20, 2, 10, 5)
        return {"train": {"short": Lengths(200, 2, 6, 1), "long": Lengths(100, 30, 50, 2)}, "val": val, "test": val}


#: few long samples in stage 0 (few batches), mostly long ones in stage 1 (four times as many)
GROWING = [{"weights": {"short": 9, "long": 1}, "until_epoch": 2}, {"weights": [1, 3]}]


class Served(pl.Callback):
    """Each epoch's batches as the model got them (sample indices, sorted inside a batch)."""

    def __init__(self) -> None:
        self.epochs: dict[int, list[list[int]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.epochs.setdefault(trainer.current_epoch, []).append(sorted(batch["index"].tolist()))


def planned(dm: VarLenDataModule, epoch: int) -> list[list[int]]:
    sampler = dm.batch_sampler("train", True)
    sampler.set_epoch(epoch)
    return [sorted(int(i) for i in batch) for batch in sampler]


def fit(dm, epochs: int, *callbacks, ckpt_path=None, **trainer_args) -> pl.Trainer:
    """A quiet CPU fit of the toy model (checkpoints only where a ModelCheckpoint is given)."""
    saves = any(isinstance(c, pl.callbacks.ModelCheckpoint) for c in callbacks)
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=saves, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         callbacks=list(callbacks), **trainer_args)  # fmt: skip
    trainer.fit(ToyModel(), datamodule=dm, ckpt_path=ckpt_path)
    return trainer


def test_a_fit_serves_every_epoch_exactly_its_stages_batches(caplog) -> None:
    """Lightning reads a loader's length once per load: the DataModule has it reload the training loader
    every epoch, so epoch 2 (four times epoch 1's batches) is served whole; without the reload it is cut."""
    dm, served, telemetry = ShortAndLong(source_weights=GROWING), Served(), PaddingTelemetry()
    with caplog.at_level(logging.INFO, logger="varlen"):
        trainer = fit(dm, 4, served, telemetry)
    assert trainer.reload_dataloaders_every_n_epochs == 1
    assert "reloads the training loader every epoch (reload_dataloaders_every_n_epochs=1)" in caplog.text
    lengths = [len(served.epochs[epoch]) for epoch in range(4)]
    assert lengths[2] > 2 * lengths[1]
    for epoch in range(4):
        assert served.epochs[epoch] == planned(dm, epoch), epoch
    for epoch, (short, long) in enumerate([(270, 30), (270, 30), (75, 225), (75, 225)]):
        logged = telemetry.epochs[epoch]
        assert logged["served_short"] == short == pytest.approx(logged["scheduled_short"])
        assert logged["served_long"] == long == pytest.approx(logged["scheduled_long"])
    text = str(dm.report)
    assert "train schedule: until epoch 2: short 0.9, long 0.1; then: short 0.25, long 0.75" in text
    assert "served in stage 0 (epochs 0-1): short 90.0% (scheduled 90.0%), long 10.0% (scheduled 10.0%)" in text
    assert "served in stage 1 (epochs 2-3): short 25.0% (scheduled 25.0%)" in text
    stages = dm.report.to_dict()["stages"]
    assert stages[1]["epochs"] == [2, 3] and stages[1]["served"]["long"] == pytest.approx(0.75)
    assert dm.report.to_dict()["train"]["sources"]["long"]["stages"] == [
        {"share": 0.1, "drawn": 30.0}, {"share": 0.75, "drawn": 225.0}]  # fmt: skip

    unreloaded, served = ShortAndLong(source_weights=GROWING), Served()
    unreloaded._reload_every_epoch = lambda: None
    fit(unreloaded, 3, served)
    assert len(served.epochs[2]) == lengths[0] < len(planned(unreloaded, 2))  # the control: Lightning cuts it


def test_a_user_reload_interval_is_made_every_epoch_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="reload_dataloaders_every_n_epochs=1, not 3"):
        trainer = fit(ShortAndLong(source_weights=GROWING), 1, reload_dataloaders_every_n_epochs=3)
    assert trainer.reload_dataloaders_every_n_epochs == 1
    constant = fit(ShortAndLong(source_weights=[1, 1]), 1)
    assert constant.reload_dataloaders_every_n_epochs == 0  # one length for every epoch: loaded once


def test_a_checkpoint_at_a_stage_boundary_and_mid_epoch_resumes_the_uninterrupted_batches(tmp_path) -> None:
    """Saved at the end of stage 0's last epoch (epoch 1) and in the middle of epoch 2 (stage 1), through
    Lightning checkpoints: the resumed fits serve exactly the uninterrupted run's batches."""
    whole = Served()
    fit(ShortAndLong(source_weights=GROWING), 4, whole)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_top_k=-1,
                                               save_on_train_epoch_end=True, filename="{epoch}")  # fmt: skip
    fit(ShortAndLong(source_weights=GROWING), 2, checkpoints)
    resumed = Served()
    fit(ShortAndLong(source_weights=GROWING), 4, resumed, ckpt_path=tmp_path / "epoch=1.ckpt")
    assert sorted(resumed.epochs) == [2, 3]
    assert all(resumed.epochs[e] == whole.epochs[e] for e in (2, 3))

    middle = len(whole.epochs[2]) // 2
    mid = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "mid", every_n_train_steps=sum(
        len(whole.epochs[e]) for e in (0, 1)) + middle, save_top_k=-1, filename="mid")  # fmt: skip
    fit(ShortAndLong(source_weights=GROWING), 3, mid)
    resumed = Served()
    fit(ShortAndLong(source_weights=GROWING), 4, resumed, ckpt_path=tmp_path / "mid" / "mid.ckpt")
    assert resumed.epochs[2] == whole.epochs[2][middle:]
    assert resumed.epochs[3] == whole.epochs[3]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([{"weights": {"short": 1, "lng": 1}, "until_epoch": 1}, {"weights": [1, 1]}], "stage 0: weights name"),
        ([{"weights": [1, 1], "until_epoch": 2}, {"weights": [1, 2], "until_epoch": 2}], "stage 1 ends at 2"),
        ([{"weights": [1, 1, 1], "until_step": 5}], "stage 0: 3 weights for 2 sources"),
        ({"stages": [{"weights": [1, 1]}], "interpolate": "cubic"}, "interpolate must be one of"),
    ],
)
def test_a_bad_schedule_is_refused_at_setup_naming_the_stage(value, said: str) -> None:
    with pytest.raises(ValueError, match=f"ShortAndLong: source_weights.*{said}"):
        ShortAndLong(source_weights=value).setup("fit")


def test_inspect_shows_each_stages_first_epoch_served_against_scheduled() -> None:
    dm = ShortAndLong(source_weights={"stages": [{"weights": [1, 0], "until_step": 30}, {"weights": [1, 1]}]})
    dm.setup("fit")
    summary = summarize(dm, world_size=2, max_batches=2)
    assert summary.schedule == "until step 30: short 1, long 0; then: short 0.5, long 0.5"
    sampler = dm.batch_sampler("train", True, num_replicas=2, rank=0)
    first = next(e for e in range(10) if sampler.scheduled.steps_before(e, 2) >= 30)
    assert [(stage, epoch) for stage, epoch, _ in summary.stages] == [(0, 0), (1, first)]
    for _, _, shares in summary.stages:
        for _, served, asked in shares:
            assert abs(served - asked) <= 1 / 300
    lines = "\n".join(summary.lines())
    assert f"stage 1, epoch {first}: short 0.500 (0.500);  long 0.500 (0.500)" in lines
    assert "stage 0, epoch 0: short 1.000 (1.000);  long 0.000 (0.000)" in lines


def test_the_sampler_lightning_rebuilds_under_ddp_keeps_the_schedule_and_the_epoch(monkeypatch) -> None:
    """Under DDP Lightning re-creates a reloaded loader's batch sampler from its saved arguments with a fresh
    DistributedSampler (epoch 0), then reads `len()`: the epoch is an argument, so the length is epoch 2's."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    dm = ShortAndLong(source_weights=GROWING)
    dm.setup("fit")
    monkeypatch.setattr(dm, "_fit_epoch", lambda: 2)  # the reload at epoch 2's start
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()
    ranks = [_update_dataloader(loader, DistributedSampler(dm.dataset("train"), num_replicas=2, rank=r)).batch_sampler
             for r in range(2)]  # fmt: skip
    direct = dm.batch_sampler("train", True, num_replicas=2, rank=0)
    assert direct.epoch == 2 and len(ranks[0]) == len(ranks[1]) == len(direct)
    direct.set_epoch(0)
    assert len(direct) * 2 < len(ranks[0])  # epoch 0's is another length: the epoch made the difference
    served = [list(sampler) for sampler in ranks]
    assert sorted(i for part in served for b in part for i in b) == sorted(direct.global_plan(2).order.tolist())


# -- YAML / the command line ------------------------------------------------------------------------


def test_varlen_inspect_takes_a_schedule_from_the_command_line(monkeypatch, capsys, tmp_path) -> None:
    """The list of stages goes through jsonargparse (the DataModules' type hint) to the DataModule, whose
    stages' first epochs `varlen inspect` shows; a bad stage is refused as the DataModule is made, naming it."""
    import sys
    from pathlib import Path

    from varlen.cli import dispatch as cli

    def inspect(*args: str) -> tuple[int, str, str]:
        config = Path(__file__).resolve().parents[1] / "configs" / "text_mixture.yaml"
        monkeypatch.setattr(sys, "argv", ["varlen", "inspect", "--config", str(config), "--max-batches", "2",
                                          "--data.init_args.synthetic_samples=400", *args])  # fmt: skip
        try:
            cli.console()
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    monkeypatch.chdir(tmp_path)
    stages = "[{weights: {main: 9, long: 1}, until_epoch: 1}, {weights: [1, 1]}]"
    code, out, err = inspect(f"--data.init_args.source_weights={stages}")
    assert code == 0, err
    assert "schedule: until epoch 1: main 0.9, long 0.1; then: main 0.5, long 0.5" in out
    assert "stage 0, epoch 0: main 0.900 (0.900);  long 0.100 (0.100)" in out
    assert "stage 1, epoch 1: main 0.500 (0.500);  long 0.500 (0.500)" in out
    # refused as the DataModule is made: one line, status 2 (issue 42: every error of a command)
    code, out, err = inspect("--data.init_args.source_weights=[{weights: {main: 1, lng: 1}, until_epoch: 1}]")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(r"source_weights.*source_weights stage 0: weights name \['lng', 'main'\]", err), err


def test_the_type_hint_takes_weights_a_list_of_stages_and_a_stages_mapping() -> None:
    from jsonargparse import ArgumentParser

    from varlen.datamodules.text import TextClassificationDataModule

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(TextClassificationDataModule, "data")
    linear = "{stages: [{weights: [1, 0], until_step: 50}, {weights: {main: 1, long: 3}}], interpolate: linear}"
    for value, parsed in [
        ("{main: 3, long: 1}", {"main": 3.0, "long": 1.0}),
        ("[3, 1]", [3.0, 1.0]),
        ("[{weights: [9, 1], until_epoch: 2}, {weights: [1, 1]}]",
         [{"weights": [9, 1], "until_epoch": 2}, {"weights": [1, 1]}]),
        (linear, {"stages": [{"weights": [1, 0], "until_step": 50}, {"weights": {"main": 1, "long": 3}}],
                  "interpolate": "linear"}),
    ]:  # fmt: skip
        assert parser.parse_args([f"--data.source_weights={value}"]).data.source_weights == parsed


def test_a_scheduled_sampler_pickles_and_serves_the_same_batches() -> None:
    """A DataModule holds its training sampler: spawn, DDP launchers and torch.save pickle it."""
    sizes, sources = data(0, [300, 60])
    stages = [{"weights": [1, 1], "until_epoch": 1}, {"weights": [1, 3]}]
    sampler = sampler_of(stages, sizes, sources)
    sampler.set_epoch(1)
    copy = pickle.loads(pickle.dumps(sampler))
    assert [list(b) for b in copy] == [list(b) for b in sampler]


# -- steps are the trainer's (issue 35) ------------------------------------------------------------------


def test_a_stage_that_ends_inside_an_epoch_changes_the_shares_at_its_step() -> None:
    """One long epoch: `until_step: 5` serves source 0 alone for 5 batches per rank, then source 1 alone,
    on every rank; the epoch's length is the second stage's plan's."""
    sizes, sources = data(3, [200, 200])
    value = [{"weights": [1, 0], "until_step": 5}, {"weights": [0, 1]}]
    for world in (1, 2):
        ranks = epoch_of([sampler_of(value, sizes, sources, world, rank) for rank in range(world)], 0)
        for batches in ranks:
            assert len(batches) > 5
            assert {int(sources[i]) for batch in batches[:5] for i in batch} == {0}
            assert {int(sources[i]) for batch in batches[5:] for i in batch} == {1}


def test_until_step_counts_the_steps_the_trainer_took() -> None:
    """`limit_train_batches=5` of stage 0's 7-batch epochs: two epochs are 10 steps, so `until_step: 10` ends
    stage 0 where epoch 2 starts (counted from the plans, epoch 1 would start at step 7 and change shares at its
    fourth batch)."""
    value = [{"weights": {"short": 1, "long": 0}, "until_step": 10}, {"weights": {"short": 0, "long": 1}}]
    dm, served = ShortAndLong(source_weights=value), Served()
    fit(dm, 4, served, limit_train_batches=5)
    long_ids = set(range(200, 300))  # the mixture numbers "long" after "short"'s 200 samples
    sources = [{i in long_ids for batch in served.epochs[e] for i in batch} for e in range(4)]
    assert sources == [{False}] * 2 + [{True}] * 2
    assert dm.served_steps == {e: 5 for e in range(4)} and dm.steps_before(2) == 10


def test_the_step_table_is_in_the_checkpoint_and_a_resume_places_the_stage_as_the_run_did(tmp_path) -> None:
    value = [{"weights": {"short": 1, "long": 0}, "until_step": 10}, {"weights": {"short": 0, "long": 1}}]
    whole = Served()
    fit(ShortAndLong(source_weights=value), 4, whole, limit_train_batches=5)
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, save_on_train_epoch_end=True)
    fit(ShortAndLong(source_weights=value), 1, saver, limit_train_batches=5)
    resumed = Served()
    dm = ShortAndLong(source_weights=value)
    fit(dm, 4, resumed, ckpt_path=next(tmp_path.glob("*.ckpt")), limit_train_batches=5)
    assert all(resumed.epochs[e] == whole.epochs[e] for e in (1, 2, 3))
    assert dm.served_steps == {e: 5 for e in range(4)}


def test_a_linear_schedule_reloads_in_constant_time_when_the_steps_are_known() -> None:
    """The sampler of epoch 40 under a linear `until_step` schedule, given where the epoch starts, counts
    no earlier epoch's plan (it counted all 40 of them at every reload)."""
    sizes, sources = data(4, [150, 150])
    value = {"stages": [{"weights": [1, 0], "until_step": 10_000}, {"weights": [0, 1]}], "interpolate": "linear"}
    counted = []
    original = BucketBatchSampler._count

    def count(self, draw, world):
        counted.append(world)
        return original(self, draw, world)

    BucketBatchSampler._count = count
    try:
        len(sampler_of(value, sizes, sources, 1, 0, epoch=40, steps_before=800))
        known = len(counted)
        counted.clear()
        len(sampler_of(value, sizes, sources, 1, 0, epoch=40))
    finally:
        BucketBatchSampler._count = original
    assert known <= 4 and len(counted) > 30
