"""Resuming with other batching settings (issue 40, item 1): a checkpoint saved inside an epoch and resumed with
another `max_tokens`, `batch_size`, cost (text `layout`), rungs (`max_shapes`, `rung_batch_sizes`),
`num_buckets` or `pad_to_multiple_of`, on any world size: the rest of the epoch is planned again over exactly
the samples not yet served, under the new settings, said in one warning; every sample of the epoch is served
once, and the next epoch is the new settings' own plan. What cannot be planned again (another draw, other
groups, a streamed plan's settings) is refused inside an epoch, naming the setting and both ways out.

`resumed_epoch` is the property's body; `scripts/resume_changes.py` runs it over many random cases and
prints the table of the closing note.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lightning.pytorch.callbacks import ModelCheckpoint
from toy import ToySequences

from varlen.batching import BucketBatchSampler, resume
from varlen.batching.padding import round_up
from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.errors import DataError
from varlen.models.base import VarLenModule
from varlen.stream.epochs import StreamBatchPlan
from varlen.stream.memory_index import ArraySizeIndex
from varlen.stream.mixture_epochs import MixtureBatchPlan

RNG = np.random.default_rng(40)
SIZES = np.clip(RNG.lognormal(3.5, 0.8, 2400), 1, 500).astype(np.int64)


@pytest.fixture(autouse=True)
def lines_said_afresh():
    """A resume's line is said once per process (a state loads twice through a DataModule): each test hears its own."""
    getattr(resume, "_SAID", set()).clear()


LINE = re.compile(r"resuming epoch \d+ at batch \d+ with .*: the [\d,]+ samples? not yet served in it (are|is) planned")


# -- the property's body: one resume, checked ------------------------------------------------------


def ranks_of(sizes: np.ndarray, run: dict, extra: dict) -> list[BucketBatchSampler]:
    """Every rank of a run (its settings, `world`; `max_shapes` fits rungs, once, as a DataModule does;
    `caps` gives each rung a batch size: `rung_batch_sizes`), with the case's seed, weights or groups."""
    plain = {k: v for k, v in run.items() if k not in ("world", "caps", "max_shapes")}
    rungs = caps = None
    if "max_shapes" in run:
        rungs = BucketBatchSampler(sizes, max_shapes=run["max_shapes"], **plain, **extra).rungs
    if rungs is not None and "caps" in run and "max_tokens" in run:
        caps = [max(1, run["caps"] - k % 3) for k in range(len(rungs[0].lengths))]
    return [
        BucketBatchSampler(
            sizes, num_replicas=run["world"], rank=r, rungs=rungs, rung_batch_sizes=caps, **plain, **extra
        )
        for r in range(run["world"])
    ]


def serve(samplers: list[BucketBatchSampler], stop: int | None = None) -> list[list[list[int]]]:
    """Each rank's batches of its current epoch from where it stands (its first `stop` of them)."""
    out = []
    for sampler in samplers:
        batches, iterator = [], iter(sampler)
        while stop is None or len(batches) < stop:
            batch = next(iterator, None)
            if batch is None:
                break
            batches.append([int(i) for i in batch])
        out.append(batches)
    return out


def flat(per_rank) -> Counter:
    return Counter(i for rank in per_rank for batch in rank for i in batch)


def within_budget(batch: list[int], sizes: np.ndarray, run: dict) -> bool:
    """The run's budget, at the sizes rounded to its multiple (its rungs pad more, and cut for that); packed
    rows hold their samples' real sizes (the multiple pads the row)."""
    if len(batch) == 1:
        return True
    if "max_tokens" not in run:
        return len(batch) <= run["batch_size"]
    if len(batch) > run.get("max_batch_size", len(batch)):
        return False
    packed = run.get("cost") == "packed"
    real = sizes[batch] if packed else round_up(sizes[batch], run.get("pad_to_multiple_of"))
    cost = real.sum() if run.get("cost") in ("sum", "packed") else len(batch) * real.max()
    return cost <= run["max_tokens"]


def load(samplers: list[BucketBatchSampler], state: dict) -> list[str]:
    """Load `state` into every rank; the warnings said."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for sampler in samplers:
            sampler.load_state_dict(state)
    return [str(w.message) for w in caught]


def draw_of(sampler: BucketBatchSampler, epoch: int) -> tuple[Counter, int]:
    """`epoch`'s draw (every sample once, unweighted) and the repeats its own plan makes to feed every rank."""
    plan = sampler.global_plan(epoch)
    return Counter(plan.order.tolist()), int((plan.bounds[:, 1] - plan.bounds[:, 0]).sum()) - len(plan.order)


def resumed_epoch(case: dict) -> dict:
    """An epoch of `case["old"]` settings served to `case["stop"]` batches per rank, saved, resumed under
    `case["new"]` (and, with `case["third"]`, saved again after `case["stop2"]` more and resumed under it);
    the counts of samples served 0 and 2+ times against the saved epoch's draw (beyond the repeats a warning
    counts), whether every check held, and the lines said. Raises AssertionError where a check fails."""
    sizes, epoch = case["sizes"], case["epoch"]
    extra = {"seed": case["seed"], **case.get("extra", {})}
    old = ranks_of(sizes, case["old"], extra)
    for sampler in old:
        sampler.set_epoch(epoch)
    whole, own = draw_of(old[0], epoch)
    head = serve(old, case["stop"])
    state = old[0].state_dict()
    assert all(sampler.state_dict() == state for sampler in old)
    runs = [case["new"]] + ([case["third"]] if "third" in case else [])
    parts, said = [head], []
    for k, run in enumerate(runs):
        new = ranks_of(sizes, run, extra)
        said += load(new, state)
        if state["batches_served"] == 0:  # nothing of the saved draw served: the epoch is the new one's own
            whole, own = draw_of(new[0], epoch)
        if new[0].epoch != epoch:  # the saved epoch was over: the next one, whole, is the new settings' own
            assert new[0].epoch == epoch + 1 and state["batches_served"] == state["epoch_batches"]
            fresh = ranks_of(sizes, run, extra)
            for sampler in fresh:
                sampler.set_epoch(epoch + 1)
            assert serve(new) == serve(fresh), "the next epoch is not the new settings' own"
            break
        if k + 1 < len(runs):
            parts.append(serve(new, case["stop2"]))
            state = new[0].state_dict()
            continue
        rest = serve(new)
        before = sum(len(part[0]) for part in parts)
        assert {len(rank) for rank in rest} == {len(rest[0])}, "unequal batch counts"
        assert {len(sampler) for sampler in new} == {before + len(rest[0])}, "len() is not the epoch's"
        assert all(within_budget(b, sizes, run) for rank in rest for b in rank), "a batch over the budget"
        parts.append(rest)
        for sampler in new:  # the next epoch: the new settings' own
            sampler.set_epoch(epoch + 1)
        fresh = ranks_of(sizes, run, extra)
        for sampler in fresh:
            sampler.set_epoch(epoch + 1)
        assert serve(new) == serve(fresh), "the next epoch is not the new settings' own"
    served = sum((flat(part) for part in parts), Counter())
    repeats = (re.search(r"fewer samples left than ranks: (\d+) batch\(es\) repeat", s) for s in set(said))
    padded = sum(int(m.group(1)) for m in repeats if m)
    lost = sum(max(0, n - served[i]) for i, n in whole.items())
    twice = max(0, sum(max(0, n - whole[i]) for i, n in served.items()) - padded - own)
    assert lost == 0, f"{lost} samples lost"
    assert twice == 0, f"{twice} samples served again beyond the {padded + own} repeats that feed every rank"
    return {"lost": lost, "twice": twice, "padded": padded + own, "lines": sorted({s for s in said if LINE.search(s)})}


# -- (a) the cases, at the sampler ---------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"max_tokens": 512, "max_shapes": 24}, {"max_tokens": 1024, "max_shapes": 24}),  # the shape policy on
        ({"max_tokens": 1024, "max_shapes": 24}, {"max_tokens": 512, "max_shapes": 24}),  # lowered after an OOM
        ({"max_tokens": 256, "cost": "packed"}, {"max_tokens": 128, "cost": "packed"}),  # packed text
        ({"max_tokens": 1024, "cost": "packed"}, {"max_tokens": 1024}),  # layout packed -> padded
        ({"batch_size": 16}, {"batch_size": 7, "pad_to_multiple_of": 8}),
    ],
)
def test_a_changed_setting_serves_every_sample_of_the_epoch_once(old: dict, new: dict) -> None:
    case = {"sizes": SIZES, "seed": 3, "epoch": 1, "stop": 11, "old": old | {"world": 2}, "new": new | {"world": 2}}
    outcome = resumed_epoch(case)
    assert outcome["twice"] == outcome["padded"] == 0
    (line,) = outcome["lines"]
    changed = next(name for name in ("max_tokens", "cost", "batch_size") if old.get(name) != new.get(name))
    assert line.startswith("resuming epoch 1 at batch 11 with ") and changed in line


def test_the_same_settings_on_the_same_ranks_resume_bit_for_bit_and_say_nothing() -> None:
    run = {"max_tokens": 512, "max_shapes": 12, "world": 3}
    whole = serve(ranks_of(SIZES, run, {"seed": 1}))
    old = ranks_of(SIZES, run, {"seed": 1})
    head = serve(old, 5)
    new = ranks_of(SIZES, run, {"seed": 1})
    assert load(new, old[0].state_dict()) == []
    assert [h + r for h, r in zip(head, serve(new), strict=True)] == whole


def test_a_state_from_before_settings_were_recorded_resumes_as_before() -> None:
    old = ranks_of(SIZES, {"max_tokens": 600, "world": 2}, {"seed": 2})
    head = serve(old, 4)
    state = {k: v for k, v in old[0].state_dict().items() if k not in ("settings", "epoch_batches")}
    new = ranks_of(SIZES, {"max_tokens": 600, "world": 3}, {"seed": 2})
    assert load(new, state) == []
    assert sorted(flat(head) + flat(serve(new))) == list(range(len(SIZES)))


def test_a_resumed_epoch_resumed_again_under_third_settings_stays_exact() -> None:
    case = {
        "sizes": SIZES, "seed": 5, "epoch": 2, "stop": 6, "stop2": 9,
        "old": {"max_tokens": 900, "world": 2, "max_shapes": 8},
        "new": {"max_tokens": 400, "world": 3, "cost": "packed"},
        "third": {"batch_size": 12, "world": 1},
    }  # fmt: skip
    outcome = resumed_epoch(case)
    assert outcome["twice"] == 0 and len(outcome["lines"]) == 2


def test_a_weighted_epoch_under_a_new_budget_serves_the_rest_of_its_draw() -> None:
    weights = RNG.random(len(SIZES)) + 0.1
    case = {
        "sizes": SIZES, "seed": 2, "epoch": 1, "stop": 7, "extra": {"weights": weights, "num_samples": 1800},
        "old": {"max_tokens": 800, "world": 2}, "new": {"max_tokens": 300, "world": 4},
    }  # fmt: skip
    assert resumed_epoch(case)["twice"] == 0


# -- refusals and the ways out ---------------------------------------------------------------------


def test_other_weights_or_groups_inside_an_epoch_are_refused_with_both_ways_out(monkeypatch) -> None:
    weights = RNG.random(len(SIZES)) + 0.1
    saved = BucketBatchSampler(SIZES, max_tokens=800, weights=weights, seed=1)
    saved.set_epoch(3)
    served = serve([saved], 4)
    state = saved.state_dict()
    ways = "saved value to finish the epoch.*VARLEN_RESUME=next_epoch to skip the rest of epoch 3 and start epoch 4"
    with pytest.raises(ValueError, match="other weights.*" + ways):
        BucketBatchSampler(SIZES, max_tokens=400, weights=weights * 2 + 1, seed=1).load_state_dict(state)
    grouped = BucketBatchSampler(SIZES, max_tokens=800, seed=1, groups=np.arange(len(SIZES)) % 3)
    plain = BucketBatchSampler(SIZES, max_tokens=800, seed=1)
    serve([plain], 2)
    with pytest.raises(ValueError, match="other groups.*" + ways.replace("3", "0").replace("4", "1")):
        grouped.load_state_dict(plain.state_dict())
    monkeypatch.setenv("VARLEN_RESUME", "next_epoch")
    skipping = BucketBatchSampler(SIZES, max_tokens=400, seed=1)
    with pytest.warns(UserWarning, match=r"VARLEN_RESUME=next_epoch: epoch 3 ends at batch 4 .*epoch 4 starts afresh"):
        skipping.load_state_dict(state)
    assert len(skipping) == 4 and list(skipping) == [] and len(served[0]) == 4
    assert skipping.state_dict()["epoch_batches"] == skipping.state_dict()["batches_served"] == 4
    skipping.set_epoch(4)
    assert list(skipping) == list(BucketBatchSampler(SIZES, max_tokens=400, seed=1, epoch=4))
    monkeypatch.setenv("VARLEN_RESUME", "sometimes")
    with pytest.raises(ValueError, match="VARLEN_RESUME='sometimes': set it to 'next_epoch'"):
        BucketBatchSampler(SIZES, max_tokens=400, seed=1).load_state_dict(state)


def test_other_weights_at_an_epoch_end_start_the_next_epoch_with_them() -> None:
    weights = RNG.random(len(SIZES)) + 0.1
    saved = BucketBatchSampler(SIZES, max_tokens=800, weights=weights, seed=1, epoch=2)
    serve([saved])
    other = BucketBatchSampler(SIZES, max_tokens=800, seed=1)
    other.load_state_dict(saved.state_dict())
    assert other.epoch == 3 and list(other) == list(BucketBatchSampler(SIZES, max_tokens=800, seed=1, epoch=3))


def index_of(seed: int) -> ArraySizeIndex:
    rng = np.random.default_rng(seed)
    return ArraySizeIndex.from_sizes([np.clip(rng.lognormal(3, 0.8, 60), 1, 300).astype(np.int64) for _ in range(8)])


@pytest.mark.parametrize("kind", ["plan", "mixture"])
def test_a_streamed_plan_of_other_settings_is_refused_inside_its_epoch_by_name(kind: str, monkeypatch) -> None:
    """Its rest would have to be read again to be planned under the new settings: refused naming the setting, its
    values and both ways out; at the epoch's end it resumes at the next one; skipped with VARLEN_RESUME."""
    index = index_of(1)

    def plan(budget: int):
        if kind == "plan":
            return StreamBatchPlan(index, max_tokens=budget, seed=3, window_batches=10)
        return MixtureBatchPlan([index, index_of(2)], max_tokens=budget, seed=3, window_batches=10)

    saved = plan(1024)
    saved.set_epoch(2)
    batches = iter(saved)
    next(batches), next(batches)
    state = saved.state_dict()
    assert state["settings"]["max_tokens"] == 1024
    with pytest.raises(ValueError, match=r"max_tokens 1024 -> 512\).*Resume with the saved values to finish epoch 2"):
        plan(512).load_state_dict(state)
    list(batches)
    finished = plan(512)
    finished.load_state_dict(saved.state_dict())
    assert finished.epoch == 3 and len(finished) == finished.plain_length(3)
    monkeypatch.setenv("VARLEN_RESUME", "next_epoch")
    skipping = plan(512)
    with pytest.warns(UserWarning, match="epoch 2 ends at batch 2"):
        skipping.load_state_dict(state)
    assert len(skipping) == 2 and list(skipping) == []


# -- (b) the property ------------------------------------------------------------------------------


@st.composite
def runs(draw, world: int | None = None) -> dict:
    """One run's batching settings and world size."""
    kind = draw(st.sampled_from(["batch_size", "padded", "sum", "packed"]))
    run: dict = {"world": world or draw(st.integers(1, 4))}
    if kind == "batch_size":
        run["batch_size"] = draw(st.integers(1, 24))
    else:
        run |= {"max_tokens": draw(st.integers(32, 1500)), "cost": kind}
        if draw(st.booleans()):
            run["max_batch_size"] = draw(st.integers(1, 24))
    if draw(st.booleans()):
        run["pad_to_multiple_of"] = draw(st.sampled_from([2, 8]))
    if draw(st.booleans()):
        run["num_buckets"] = draw(st.integers(1, 12))
    if kind in ("batch_size", "padded") and draw(st.booleans()):
        run["max_shapes"] = draw(st.integers(1, 12))
        if kind == "padded" and draw(st.booleans()):
            run["caps"] = draw(st.integers(1, 10))
    return run


@st.composite
def changes(draw) -> dict:
    n = draw(st.integers(8, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    sizes = np.clip(np.rint(rng.lognormal(draw(st.floats(1.0, 6.0)), 1.0, n)), 1, 3000).astype(np.int64)
    old = draw(runs())
    new = draw(runs()) if draw(st.booleans()) else draw(one_change(old))
    case = {"sizes": sizes, "seed": draw(st.integers(0, 99)), "epoch": draw(st.integers(0, 2)), "old": old, "new": new}
    if draw(st.booleans()):
        case["extra"] = {"groups": rng.integers(0, draw(st.integers(1, 5)), n)}
    elif draw(st.booleans()):
        case["extra"] = {"weights": rng.random(n) + 0.05, "replacement": draw(st.booleans())}
    length = (
        len(ranks_of(sizes, old | {"world": 1}, {"seed": case["seed"], **case.get("extra", {})})[0]) // old["world"]
    )
    case["stop"] = draw(st.integers(0, length))
    if draw(st.integers(0, 3)) == 0:
        case["third"], case["stop2"] = draw(runs()), draw(st.integers(0, 6))
    return case


@st.composite
def one_change(draw, old: dict) -> dict:
    """`old` with one setting changed (the common resume: a lower budget, another world size...)."""
    new = dict(old)
    names = ["world", "budget", "pad_to_multiple_of", "num_buckets", "max_shapes", "cost", "cap", "caps"]
    name = draw(st.sampled_from(names))
    if name == "world":
        new["world"] = draw(st.integers(1, 4))
    elif name == "budget" and "max_tokens" in old:
        new["max_tokens"] = max(8, old["max_tokens"] * draw(st.sampled_from([1, 2])) // draw(st.sampled_from([1, 2])))
    elif name == "budget":
        new["batch_size"] = draw(st.integers(1, 24))
    elif name == "pad_to_multiple_of":
        new["pad_to_multiple_of"] = draw(st.sampled_from([None, 2, 8]))
    elif name == "num_buckets":
        new["num_buckets"] = draw(st.sampled_from([None, 1, 3, 9]))
    elif name == "max_shapes" and old.get("cost", "padded") == "padded":
        new["max_shapes"] = draw(st.integers(1, 12))
        new.pop("caps", None)
    elif name == "cap" and "max_tokens" in old:
        new["max_batch_size"] = draw(st.sampled_from([None, 1, 4, 16]))
    elif name == "caps" and "max_shapes" in old and old.get("cost") == "padded":
        new["caps"] = draw(st.integers(1, 10))
    elif name == "cost" and "max_tokens" in old:
        new["cost"] = draw(st.sampled_from(["padded", "sum", "packed"]))
        if new["cost"] != "padded":
            new.pop("max_shapes", None), new.pop("caps", None)
    return {k: v for k, v in new.items() if v is not None}


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(changes())
def test_random_changes_serve_every_sample_of_the_epoch_once_and_then_the_new_plan(case: dict) -> None:
    """Random sizes, saved settings, new settings (batch size, budget, cost, rungs and their batch sizes, multiple,
    buckets), world sizes 1-4, weights or groups kept, save points anywhere (the epoch's end too) and a second
    resume: no sample lost, none served twice beyond the counted repeats that feed every rank, budgets held,
    equal counts, and the next epoch the new settings' own."""
    outcome = resumed_epoch(case)
    assert outcome["lost"] == 0 and outcome["twice"] == 0


# -- (c) through a DataModule and Lightning -----------------------------------------------------------


class Sequences(VarLenDataModule):
    """Toy sequences padded to the rungs by the default collate (the shape policy on)."""

    ragged_keys = ("ids",)
    mask_keys = ("ids_mask",)

    def __init__(self, max_tokens: int = 192, max_shapes: int | None = 6, seed: int = 0) -> None:
        super().__init__(**base_args(locals()))

    def build(self, stage: str | None) -> dict[str, ToySequences]:
        val = ToySequences(32, 2)
        return {"train": ToySequences(240, 1), "val": val, "test": val}


class Pooled(VarLenModule):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, batch: dict) -> torch.Tensor:
        mask = batch["ids_mask"].unsqueeze(-1).float()
        return self.head((self.embed(batch["ids"]) * mask).sum(1) / mask.sum(1))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(batch), torch.as_tensor(batch["label"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Recorder(pl.Callback):
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append((trainer.current_epoch, batch["index"].tolist()))


def fit(root: Path, dm: Sequences, epochs: int, ckpt_path: Path | None = None, every: int = 0) -> list:
    recorder = Recorder()
    callbacks = [recorder]
    if every:
        callbacks.append(ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1, filename="{step}"))
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=bool(every), callbacks=callbacks, num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Pooled(), datamodule=dm, ckpt_path=ckpt_path)
    return recorder.batches


def test_a_checkpoint_resumed_with_a_lower_budget_serves_every_sample_once(tmp_path: Path) -> None:
    """max_tokens 192 -> 96 from a step inside epoch 1 (the shape policy fits new rungs): epoch 1 serves every
    sample once, epoch 2 is a whole epoch of the new settings (its loader reloaded: it is longer than the
    resumed one), and the line says what changed."""
    first = fit(tmp_path / "first", Sequences(max_tokens=192), 2, every=3)
    per_epoch = sum(e == 0 for e, _ in first)
    step = 3 * (per_epoch // 3 + 2)
    assert per_epoch < step < 2 * per_epoch
    with pytest.warns(UserWarning, match=r"resuming epoch 1 at batch \d+ with max_tokens 192 -> 96, rungs"):
        resumed = fit(
            tmp_path / "again", Sequences(max_tokens=96), 3, ckpt_path=tmp_path / "first" / f"step={step}.ckpt"
        )
    served = Counter(i for _, b in first[per_epoch:step] for i in b) + Counter(
        i for e, b in resumed if e == 1 for i in b
    )
    assert sorted(served) == list(range(240)) and set(served.values()) == {1}
    assert sorted(i for e, b in resumed if e == 2 for i in b) == list(range(240))
    dm = Sequences(max_tokens=96)
    dm.setup("fit")
    own = dm.batch_sampler("train", True)
    own.set_epoch(2)
    assert [b for e, b in resumed if e == 2] == list(own)


class Labelled(ToySequences):
    @property
    def labels(self) -> np.ndarray:
        return np.array([int(self[i]["label"]) for i in range(len(self))])


class Weighted(Sequences):
    """Toy sequences drawn by `sample_weights` (balanced classes) or not."""

    def __init__(self, weighted: bool = False) -> None:
        super().__init__()
        self.sample_weights = "balanced" if weighted else None

    def build(self, stage: str | None) -> dict[str, Labelled]:
        val = Labelled(32, 2)
        return {"train": Labelled(240, 1), "val": val, "test": val}


def test_a_mid_epoch_checkpoint_of_other_weights_is_refused_or_its_rest_skipped(tmp_path: Path, monkeypatch) -> None:
    """Its draw cannot be planned again: refused before the first step, naming the setting, both values and both
    ways out; at an epoch's end the new weights simply start; with VARLEN_RESUME=next_epoch the epoch ends where
    the checkpoint stopped and the next one is whole."""
    first = fit(tmp_path / "first", Weighted(weighted=True), 2, every=3)
    per_epoch = sum(e == 0 for e, _ in first)
    step = 3 * (per_epoch // 3 + 2)
    assert per_epoch % 3 == 0 and per_epoch < step < 2 * per_epoch
    checkpoint = tmp_path / "first" / f"step={step}.ckpt"
    said = (
        rf"inside epoch 1 \({step - per_epoch} batches per rank served\).*sample_weights='balanced' where this "
        r"DataModule has sample_weights=None.*Resume with sample_weights='balanced' to finish epoch 1.*"
        r"VARLEN_RESUME=next_epoch to skip the rest of epoch 1 and start epoch 2 with sample_weights=None"
    )
    with pytest.raises(DataError, match=said):
        fit(tmp_path / "refused", Weighted(), 3, ckpt_path=checkpoint)
    ended = fit(tmp_path / "ended", Weighted(), 3, ckpt_path=tmp_path / "first" / f"step={per_epoch}.ckpt")
    assert all(sorted(i for e, b in ended if e == epoch for i in b) == list(range(240)) for epoch in (1, 2))
    monkeypatch.setenv("VARLEN_RESUME", "next_epoch")
    with pytest.warns(UserWarning, match=rf"epoch 1 ends at batch {step - per_epoch} per rank .*epoch 2 starts"):
        skipped = fit(tmp_path / "skipped", Weighted(), 3, ckpt_path=checkpoint)
    assert [e for e, _ in skipped] == [2] * (len(ended) // 2)
    assert sorted(i for _, b in skipped for i in b) == list(range(240))
