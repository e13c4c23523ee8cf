"""Bearing across operating conditions: condition splits with a time-block val, the simulator's loads,
seeded training augmentation, and AdaBN (statistics only, exact, padding-invariant)."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import numpy as np
import pytest
import scipy.signal
import test_bearing as base
import torch
from test_bearing import SMALL, coverage, shared_positions

from varlen.batching import EpochIndices
from varlen.datamodules.bearing import BearingDataModule
from varlen.datasets.bearing import BearingCollator, WindowAugment, simulate_recordings
from varlen.datasets.bearing.splits import GAP, OTHER, UNIT
from varlen.datasets.bearing.synthetic import BPFO, SPEED_ONLY, load_effects
from varlen.errors import DataError
from varlen.models.bearing import BearingClassifier, LoaderBatches
from varlen.prepare.report import SOURCE

LOADS = {**SMALL, "simulated_per_class": 1, "simulated_loads": [0, 1, 2]}
CROSS = {**LOADS, "split": "condition", "train_conditions": ["0"], "test_conditions": ["2"]}
AUGMENT = {"augment": True, "augment_shift": 100, "augment_scale": 0.2, "augment_noise": 0.1, "augment_speed": 0.05}


def quiet_setup(**args) -> BearingDataModule:
    """A set-up DataModule; warnings about classes missing from a split are silenced."""
    dm = BearingDataModule(**args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup()
    return dm


def conditions_of(dm: BearingDataModule, split: str) -> set[str]:
    return {dm.recordings[r].condition for r in np.unique(dm.dataset(split).recording)}


# -- the condition split ---------------------------------------------------------------------------


def test_condition_split_carves_val_from_train_by_time_blocks_and_keeps_test_whole():
    dm = quiet_setup(**{**SMALL, "simulated_loads": [0, 1], "split": "condition", "test_conditions": ["1"]})
    assert conditions_of(dm, "train") == conditions_of(dm, "val") == {"0"} and conditions_of(dm, "test") == {"1"}
    train, val, test = (dm.dataset(s) for s in ("train", "val", "test"))
    assert set(np.unique(val.recording)) == set(np.unique(train.recording))  # val: a block of every train recording
    for r in np.unique(train.recording).tolist():
        train_end = int((train.starts + train.lengths)[train.recording == r].max())
        val_start = int(val.starts[val.recording == r].min())
        assert val_start - train_end >= dm.windowing.gap == dm.window  # after the train block and a whole gap
        assert int((val.starts + val.lengths)[val.recording == r].max()) == dm.recordings[r].signal.shape[1]
    assert shared_positions(dm) == 0
    for r, covered in coverage(dm)["test"].items():  # test recordings whole: every sample in a window
        assert covered.all() and not (set(coverage(dm)["train"]) | set(coverage(dm)["val"])) & {r}
    n_train = len(np.unique(train.recording))
    assert dm.report.split("val").unused[(UNIT, GAP)] == dm.window * n_train
    assert dm.report.split("test").unused[(UNIT, GAP)] == 0


def test_train_conditions_keep_the_named_loads_only():
    dm = quiet_setup(**CROSS)
    assert conditions_of(dm, "train") == conditions_of(dm, "val") == {"0"} and conditions_of(dm, "test") == {"2"}
    assert {r.condition for r in dm.recordings} == {"0", "2"}  # load 1 is not served (its rows stay in the file)
    assert len(dm.store.lengths) == len(dm.recordings)  # the served store indexes those only
    left_out = simulate_recordings(1, 0, SMALL["simulated_seconds"], loads=[0, 1, 2])
    expected = sum(int(np.ceil(r.signal.shape[1] * 12000 / r.sampling_rate)) for r in left_out if r.condition == "1")
    assert dm.report.split(SOURCE).unused[(UNIT, OTHER)] == expected > 0
    assert shared_positions(dm) == 0
    with pytest.raises(ValueError, match=r"\['2'\] are in both train_conditions and test_conditions"):
        BearingDataModule(**{**CROSS, "train_conditions": ["0", "2"]})
    with pytest.raises(ValueError, match="train_conditions needs split='condition'"):
        BearingDataModule(**LOADS, train_conditions=["0"])
    with pytest.raises(ValueError, match="train_conditions is empty"):
        BearingDataModule(**{**CROSS, "train_conditions": []})
    with pytest.raises(DataError, match=r"train_conditions \['7'\]: no recording .* \(present: \['0', '1', '2'\]\)"):
        quiet_setup(**{**CROSS, "train_conditions": ["7"]})


# -- the simulator's loads -------------------------------------------------------------------------


def test_the_default_simulator_output_is_unchanged():
    """Regression figures from the simulator before loads had effects (one random load per recording)."""
    recs = simulate_recordings(1, 0, (1.0, 2.0), class_names=["normal", "IR007", "OR021"])
    figures = [(r.name, r.condition, r.signal.shape, r.sampling_rate) for r in recs]
    assert figures == [
        ("sim_normal_0", "1", (1, 96000), 48000.0),
        ("sim_IR007_0", "1", (1, 96000), 48000.0),
        ("sim_OR021_0", "1", (1, 24000), 12000.0),
    ]
    np.testing.assert_allclose([r.signal.std() for r in recs], [0.0885343477, 0.1019002795, 0.1444907486], rtol=1e-6)
    np.testing.assert_allclose(recs[2].signal[0, :3], [-0.0994760767, -0.1301146299, 0.0085408650], atol=1e-7)
    assert load_effects(0) == SPEED_ONLY


def envelope_peak(signal: np.ndarray, rate: float, low: float, high: float) -> float:
    """The strongest frequency of the signal's envelope between `low` and `high` Hz."""
    envelope = np.abs(scipy.signal.hilbert(signal - signal.mean()))
    spectrum = np.abs(np.fft.rfft(envelope - envelope.mean()))
    freqs = np.fft.rfftfreq(len(envelope), 1 / rate)
    band = (freqs >= low) & (freqs <= high)
    return float(freqs[band][np.argmax(spectrum[band])])


def test_loads_change_speed_fault_frequencies_amplitudes_and_noise():
    recs = simulate_recordings(2, 0, (4.0, 4.0), (12000,), ["normal", "OR021"], loads=[0, 3])
    assert [r.name for r in recs[:3]] == ["sim_normal_0hp_0", "sim_normal_0hp_1", "sim_OR021_0hp_0"]
    by = {(r.label, r.condition): [] for r in recs}
    for r in recs:
        by[(r.label, r.condition)].append(r)
    for r in by[("OR021", "0")] + by[("OR021", "3")]:  # the outer-race rate follows each recording's speed
        assert envelope_peak(r.signal[0], r.sampling_rate, 80, 130) == pytest.approx(BPFO * r.rpm / 60, abs=0.5)
    rpm = {c: np.mean([r.rpm for r in by[("OR021", c)]]) for c in ("0", "3")}
    assert rpm["3"] < 0.97 * rpm["0"]  # 1730 against 1797 rpm
    std = {key: [float(r.signal.std()) for r in rs] for key, rs in by.items()}
    assert min(std[("OR021", "3")]) > 1.2 * max(std[("OR021", "0")])  # harder impacts
    assert min(std[("normal", "3")]) > 1.1 * max(std[("normal", "0")])  # more noise and shaft vibration
    with pytest.raises(ValueError, match=r"simulated loads must be among \[0, 1, 2, 3\]"):
        simulate_recordings(1, 0, loads=[5])


# -- augmentation ----------------------------------------------------------------------------------


def test_augmented_windows_are_drawn_per_seed_epoch_and_window():
    exact = {"max_shapes": None}  # each batch padded to its own longest window (the tail alone: narrower)
    dm = quiet_setup(**SMALL, **AUGMENT, **exact)
    ds, plain = dm.dataset("train"), quiet_setup(**SMALL, **exact).dataset("train")
    picks = [0, 5, 9, int(np.argmin(ds.lengths))]
    batch = ds.__getitems__(EpochIndices(picks, 3))
    again = ds.__getitems__(EpochIndices(picks[::-1] + [1, 2], 3))  # other batch mates, other order
    for row in range(len(picks)):
        other = len(picks) - 1 - row
        assert batch.starts[row] == again.starts[other]
        n = int(batch.lengths[row])
        torch.testing.assert_close(batch.signals[row, :, :n], again.signals[other, :, :n], rtol=0, atol=0)
    alone = ds.__getitems__(EpochIndices(picks[-1:], 3))  # the tail alone: a narrower batch, the same draws
    assert alone.signals.shape[-1] < batch.signals.shape[-1]
    torch.testing.assert_close(alone.signals[0], batch.signals[-1, :, : alone.signals.shape[-1]], rtol=0, atol=0)
    assert not torch.equal(ds.__getitems__(EpochIndices(picks, 4)).signals, batch.signals)  # a new epoch, new draws
    assert torch.equal(ds.__getitems__(picks).signals, plain.__getitems__(picks).signals)  # no epoch: unaugmented
    assert torch.equal(batch.mask, plain.__getitems__(picks).mask)
    assert not batch.signals[~batch.mask[:, None, :].expand_as(batch.signals)].any()  # padding stays zero


def lanczos(signal: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`signal` at fractional `positions`: Lanczos-3 weights of the 6 nearest samples, normalized."""
    taps = np.floor(positions)[:, None] + np.arange(-2, 4)
    weights = np.sinc(positions[:, None] - taps) * np.sinc((positions[:, None] - taps) / 3)
    return (signal[taps.astype(np.int64)] * weights).sum(1) / weights.sum(1)


@pytest.mark.parametrize("speed", [0.0, 0.2])
def test_augmented_windows_stay_inside_their_block(speed):
    moves = {"augment_shift": 10_000, "augment_scale": 0.0, "augment_noise": 0.0, "augment_speed": speed}
    dm = quiet_setup(**SMALL, **{**AUGMENT, **moves})
    ds = dm.dataset("train")
    every = np.arange(len(ds))
    for epoch in range(3):
        batch = ds.__getitems__(EpochIndices(every, epoch))
        starts, spans, rates = ds.augment.place(every, epoch, ds.starts, ds.lengths, ds.bounds)
        first = starts + (2 if speed else 0)  # the kernel's two neighbours before the first sample
        assert np.array_equal(batch.starts.numpy(), first) and torch.equal(batch.lengths, torch.tensor(ds.lengths))
        assert np.all(starts >= ds.bounds[:, 0]) and np.all(starts + spans <= ds.bounds[:, 1])
        assert (starts != ds.starts).mean() > 0.5 and (speed == 0) == np.all(rates == 1)
        mean, std = ds.normalization
        for row in (0, len(ds) - 1):  # the values are the buffer's at the shifted start, resampled at the rate
            n, signal = int(ds.lengths[row]), (ds.buffers[int(ds.recording[row])][0] - mean[0]) / std[0]
            expected = lanczos(signal, first[row] + np.arange(n) * rates[row])
            np.testing.assert_allclose(batch.signals[row, 0, :n].numpy(), expected, rtol=0, atol=1e-5)
            assert not batch.signals[row, :, n:].any()
    val = dm.dataset("val")  # train bounds end before the gap, so no moved window reaches val
    for r in np.unique(ds.recording).tolist():
        assert ds.bounds[ds.recording == r, 1].max() + dm.windowing.gap <= val.starts[val.recording == r].min()


def test_only_training_batches_carry_their_epoch():
    dm = quiet_setup(**SMALL, **AUGMENT)
    train = dm.train_dataloader().batch_sampler
    train.set_epoch(2)
    assert all(isinstance(b, EpochIndices) and b.epoch == 2 for b in train)
    assert not any(isinstance(b, EpochIndices) for b in dm.val_dataloader().batch_sampler)
    assert dm.dataset("val").augment is None and dm.dataset("test").augment is None
    with pytest.raises(ValueError, match="0 <= scale < 1"):
        BearingDataModule(**SMALL, augment=True, augment_scale=1.5)
    with pytest.raises(ValueError, match="shift >= 0"):
        WindowAugment(0, shift=-1)
    with pytest.raises(ValueError, match="0 <= speed < 0.5"):
        BearingDataModule(**SMALL, augment=True, augment_speed=0.7)


class TestBearingAugmentedContract(base.TestBearingContract):
    """The whole contract with augmented training batches: resume replays the draws, epochs differ,
    and the CLI works (the 2-process fit is left to the contracts that cover it, see below)."""

    cli_overrides = (*base.CLI_SMALL, *(f"--data.init_args.{k}={v}" for k, v in AUGMENT.items()))

    def make_datamodule(self, **overrides):
        return super().make_datamodule(**{**AUGMENT, **overrides})

    def test_ddp_fit_covers_all_and_metrics_equal_one_process(self, tmp_path) -> None:
        pytest.skip(
            "a 2-process fit costs ~25 s: the plain bearing contract's covers the split, the plan and the "
            "recording votes under DDP, and the hyperspectral contract's the batches that carry their epoch"
        )


# -- AdaBN -----------------------------------------------------------------------------------------


def tiny_model() -> BearingClassifier:
    torch.manual_seed(0)
    return BearingClassifier(
        num_classes=3, in_channels=1, conv_channels=(4, 6, 5), first_kernel=8, first_stride=2, hidden=8
    ).eval()


def tiny_windows(lengths, offset: float = 2.0, scale: float = 3.0, seed: int = 0) -> list[dict]:
    """Windows of a 'target condition': shifted and louder than the model's (untrained) statistics."""
    rng = np.random.default_rng(seed)
    return [
        {
            "index": i,
            "signal": (offset + scale * rng.normal(size=(1, n))).astype(np.float32),
            "label": i % 3,
            "recording_id": i % 2,
            "window_index": i,
            "start": 0,
        }
        for i, n in enumerate(lengths)
    ]


LENGTHS = [64, 40, 64, 23, 64, 57, 30]


def batches_of(samples, size: int, pad_to_multiple_of: int | None = None) -> list[dict]:
    collate = BearingCollator(pad_to_multiple_of)
    return [collate(samples[i : i + size]) for i in range(0, len(samples), size)]


def normalized_inputs(model: BearingClassifier, batch) -> list[torch.Tensor]:
    """Per batch norm: its input over real positions, normalized with its running statistics `[C, n]`."""
    seen = []

    def hook(norm, args, _output):
        x, mask = args
        z = (x - norm.running_mean[None, :, None]) / torch.sqrt(norm.running_var[None, :, None] + norm.eps)
        seen.append(z.permute(1, 0, 2)[:, mask])

    handles = [block.norm.register_forward_hook(hook) for block in model.blocks]
    with torch.no_grad():
        model(batch)
    for handle in handles:
        handle.remove()
    return seen


def test_adabn_sets_the_statistics_to_the_target_windows_and_nothing_else():
    model = tiny_model()
    weights = {k: v.clone() for k, v in model.named_parameters()}
    tracked = [int(block.norm.num_batches_tracked) for block in model.blocks]
    samples = tiny_windows(LENGTHS)
    batches = [{k: v for k, v in b.items() if k != "labels"} for b in batches_of(samples, 3)]  # no labels needed
    before = normalized_inputs(model, batches_of(samples, len(samples))[0])
    assert abs(float(before[0].mean())) > 0.5  # the target is not what the statistics describe
    model.adapt_batchnorm(batches)
    for z in normalized_inputs(model, batches_of(samples, len(samples))[0]):  # every layer: zero mean, unit variance
        torch.testing.assert_close(z.mean(dim=1), torch.zeros(len(z)), atol=1e-5, rtol=0)
        torch.testing.assert_close(z.var(dim=1), torch.ones(len(z)), atol=1e-3, rtol=0)
    assert all(torch.equal(v, weights[k]) and v.grad is None for k, v in model.named_parameters())
    assert [int(block.norm.num_batches_tracked) for block in model.blocks] == tracked
    assert not model.training


def test_adabn_does_not_depend_on_batching_or_padding():
    samples = tiny_windows(LENGTHS)
    stats = []
    for size, multiple in ((len(samples), None), (2, None), (3, 32)):
        model = tiny_model()
        model.adapt_batchnorm(iter(batches_of(samples, size, multiple)))  # a one-shot iterator is listed first
        stats.append(torch.cat([torch.cat([b.norm.running_mean, b.norm.running_var]) for b in model.blocks]))
    torch.testing.assert_close(stats[1], stats[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats[2], stats[0], rtol=1e-5, atol=1e-6)
    short = samples[3:4]  # 23 samples: alone, and beside longer windows with padding to 32
    with torch.no_grad():
        alone = model(BearingCollator()(short))[0]
        together = model(BearingCollator(32)([*samples[:3], *short]))[3]
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


class StatisticsSeen(pl.Callback):
    """The first batch norm's running mean at every test batch."""

    def __init__(self) -> None:
        self.means: list[torch.Tensor] = []

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self.means.append(pl_module.blocks[0].norm.running_mean.clone())


def test_adabn_runs_before_test_on_the_test_windows_and_restores_the_source_statistics():
    dm = quiet_setup(**CROSS, batch_size=16)
    model = BearingClassifier(num_classes=dm.num_classes, in_channels=dm.in_channels, adabn=True)
    source = {k: v.clone() for k, v in model.state_dict().items()}
    seen = StatisticsSeen()
    trainer = pl.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[seen]
    )
    adapted = BearingClassifier(num_classes=dm.num_classes, in_channels=dm.in_channels)
    adapted.load_state_dict(source)
    adapted.adapt_batchnorm(LoaderBatches(dm.test_dataloader()))
    result = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert seen.means and all(torch.equal(m, adapted.blocks[0].norm.running_mean) for m in seen.means)
    assert not torch.equal(seen.means[0], source["blocks.0.norm.running_mean"])
    assert all(torch.equal(v, source[k]) for k, v in model.state_dict().items())  # restored after the test
    model.adabn = False
    plain = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert result["test/accuracy"] != plain["test/accuracy"] or result["test/loss"] != plain["test/loss"]
