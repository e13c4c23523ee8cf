"""varlen.prepare.splits on its own: disjoint, complete, deterministic per seed, fractions honoured."""

import numpy as np
import pytest

from varlen.prepare import splits

RNG = np.random.default_rng(0)
FRACTIONS = {"train": 0.7, "val": 0.1, "test": 0.2}


def assert_partition(parts: dict[str, np.ndarray], n: int) -> None:
    joined = np.concatenate(list(parts.values()))
    assert len(joined) == len(np.unique(joined)) == n  # no sample in two splits, none left out
    assert all(np.all(np.diff(p) > 0) for p in parts.values())  # sorted


@pytest.mark.parametrize(
    "fractions, message",
    [
        ({"train": 0.8, "val": 0.3}, "sum to 1"),
        ({"train": 1.2, "val": -0.2}, r"in \[0, 1\]"),
        ({}, "at least one"),
        ({"train": 0.0, "val": 0.0}, "sum to 1"),
    ],
)
def test_bad_fractions_are_refused(fractions, message) -> None:
    with pytest.raises(ValueError, match=message):
        splits.check_fractions(fractions)


def test_fractions_of_and_its_limits() -> None:
    assert splits.fractions_of(0.1, 0.2) == pytest.approx({"train": 0.7, "val": 0.1, "test": 0.2})
    assert "test" not in splits.fractions_of(0.25)
    for val, test in [(0.0, 0.1), (0.6, 0.5), (1.0, 0.0)]:
        with pytest.raises(ValueError):
            splits.fractions_of(val, test)


def test_named_streams_are_independent_and_reproducible() -> None:
    a = splits.stream(3, "val split").integers(0, 1 << 30, 8)
    assert np.array_equal(a, splits.stream(3, "val split").integers(0, 1 << 30, 8))
    assert not np.array_equal(a, splits.stream(3, "band counts").integers(0, 1 << 30, 8))
    assert not np.array_equal(a, splits.stream(4, "val split").integers(0, 1 << 30, 8))


def test_random_split_is_a_seeded_partition_with_the_asked_sizes() -> None:
    parts = splits.random_split(1001, FRACTIONS, seed=0)
    assert_partition(parts, 1001)
    assert {k: len(v) for k, v in parts.items()} == {"train": 701, "val": 100, "test": 200}
    again = splits.random_split(1001, FRACTIONS, seed=0)
    other = splits.random_split(1001, FRACTIONS, seed=1)
    assert all(np.array_equal(parts[k], again[k]) for k in parts)
    assert not np.array_equal(parts["test"], other["test"])


def test_stratified_split_keeps_the_class_mix_and_every_class_everywhere() -> None:
    labels = np.repeat([0, 1, 2], [600, 300, 3])  # a rare class of 3 still reaches every split
    parts = splits.stratified_split(labels, FRACTIONS, seed=0)
    assert_partition(parts, len(labels))
    for name, part in parts.items():
        counts = np.bincount(labels[part], minlength=3)
        assert counts[2] == 1, (name, counts)
        assert counts[0] == pytest.approx(600 * FRACTIONS[name], abs=2)
        assert counts[1] == pytest.approx(300 * FRACTIONS[name], abs=2)
    again = splits.stratified_split(labels, FRACTIONS, seed=0)
    assert all(np.array_equal(parts[k], again[k]) for k in parts)
    assert not np.array_equal(parts["val"], splits.stratified_split(labels, FRACTIONS, seed=1)["val"])


def test_group_split_never_puts_a_group_in_two_splits() -> None:
    groups = RNG.integers(0, 40, 2000)
    labels = groups % 4  # one label per group
    for kwargs in ({}, {"labels": labels}):
        parts = splits.group_split(groups, FRACTIONS, seed=0, **kwargs)
        assert_partition(parts, len(groups))
        owners = [set(groups[p].tolist()) for p in parts.values()]
        assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1 :])
    stratified = splits.group_split(groups, FRACTIONS, seed=0, labels=labels)
    assert all(set(labels[p].tolist()) == {0, 1, 2, 3} for p in stratified.values())


def test_group_split_refuses_groups_with_mixed_labels() -> None:
    with pytest.raises(ValueError, match="several labels"):
        splits.group_split([0, 0, 1, 1], {"train": 0.5, "test": 0.5}, seed=0, labels=[0, 1, 0, 0])


def test_keyed_split_keeps_every_copy_of_a_key_in_one_split() -> None:
    keys = RNG.integers(0, 40, 300)  # about 7 copies of each key
    labels = keys % 3  # a key's copies share a class here
    for parts in (splits.keyed_split(keys, FRACTIONS, 0), splits.keyed_split(keys, FRACTIONS, 0, labels)):
        assert_partition(parts, 300)
        homes = [set(keys[p].tolist()) for p in parts.values()]
        assert not (homes[0] & homes[1]) and not (homes[0] & homes[2]) and not (homes[1] & homes[2])
        assert abs(len(parts["train"]) - 210) < 40  # whole keys of about 7: near the asked share
    again = splits.keyed_split(keys, FRACTIONS, 0, labels)
    assert all(np.array_equal(again[k], parts[k]) for k in parts)


def test_keyed_split_of_distinct_keys_is_the_plain_split() -> None:
    """Without duplicates nothing moves: the random and stratified splits of every DataModule stay as they were."""
    for n in (3, 10, 101):
        keys = [f"item {i}" for i in RNG.permutation(n)]
        labels = RNG.integers(0, 3, n)
        plain, keyed = splits.random_split(n, FRACTIONS, 4, "s"), splits.keyed_split(keys, FRACTIONS, 4, name="s")
        assert all(np.array_equal(plain[k], keyed[k]) for k in FRACTIONS)
        plain, keyed = (
            splits.stratified_split(labels, FRACTIONS, 4, "t"),
            splits.keyed_split(keys, FRACTIONS, 4, labels, "t"),
        )
        assert all(np.array_equal(plain[k], keyed[k]) for k in FRACTIONS)


def test_time_blocks_are_ordered_disjoint_and_separated_by_the_gap() -> None:
    lengths = np.array([10_000, 3_000, 1_234])
    blocks = splits.time_block_split(lengths, FRACTIONS, gap=100)
    assert list(blocks) == ["train", "val", "test"]
    (t0, t1), (v0, v1), (s0, s1) = blocks.values()
    assert np.all(t0 == 0) and np.all(s1 == lengths)
    assert np.all(v0 - t1 == 100) and np.all(s0 - v1 == 100)  # the gaps
    assert np.all(v1 - v0 == np.round(lengths * 0.1)) and np.all(s1 - s0 == np.round(lengths * 0.2))
    with pytest.raises(ValueError, match="gap"):
        splits.time_block_split(lengths, FRACTIONS, gap=-1)


def test_condition_split_holds_out_whole_conditions() -> None:
    conditions = np.array(["0", "1", "2", "3"] * 5)
    parts = splits.condition_split(conditions, test=["3"], val=["2"])
    assert_partition(parts, len(conditions))
    assert set(conditions[parts["test"]]) == {"3"} and set(conditions[parts["val"]]) == {"2"}
    assert set(conditions[parts["train"]]) == {"0", "1"}
    assert set(splits.condition_split(conditions, test=["3"])) == {"train", "test"}
    with pytest.raises(ValueError, match="both"):
        splits.condition_split(conditions, test=["3"], val=["3"])
    with pytest.raises(ValueError, match="no sample for"):
        splits.condition_split(conditions, test=["7"])


def test_scaffold_split_shares_no_scaffold_and_puts_common_ones_in_train() -> None:
    scaffolds = [f"s{k}" for k in RNG.zipf(1.6, 500) % 60]
    parts = splits.scaffold_split(scaffolds, {"train": 0.8, "val": 0.1, "test": 0.1})
    assert_partition(parts, len(scaffolds))
    sets = {k: {scaffolds[i] for i in v} for k, v in parts.items()}
    assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"])
    most_common = max(set(scaffolds), key=scaffolds.count)
    assert most_common in sets["train"]
    assert len(parts["train"]) <= 400  # train is never over its share
    assert splits.scaffold_split(scaffolds, {"train": 0.8, "val": 0.1, "test": 0.1})["test"].tolist() == (
        parts["test"].tolist()
    )


def test_spatial_blocks_keep_patch_footprints_apart() -> None:
    labels = RNG.integers(0, 5, (90, 70))
    radius = 2
    result = splits.spatial_block_split(labels, FRACTIONS, block_size=12, buffer=radius, radius=radius, seed=0)
    footprints = {k: splits.footprint_map(m, radius) for k, m in result.masks.items()}
    names = list(footprints)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not (footprints[a] & footprints[b]).any(), (a, b)
    labelled = int((labels > 0).sum())
    centres = sum(int(m.sum()) for m in result.masks.values())
    unused = sum(sum(v.values()) for v in result.unused.values())
    assert centres + unused == labelled  # every labelled pixel is a centre or counted as unused
    shares = {k: m.sum() / centres for k, m in result.masks.items()}
    assert shares["train"] > shares["test"] > shares["val"] > 0
    again = splits.spatial_block_split(labels, FRACTIONS, block_size=12, buffer=radius, radius=radius, seed=0)
    assert all(np.array_equal(result.masks[k], again.masks[k]) for k in names)
    with pytest.raises(ValueError, match="smaller than the patch radius"):
        splits.spatial_block_split(labels, FRACTIONS, block_size=12, buffer=1, radius=2, seed=0)


def test_patch_fits_marks_the_border() -> None:
    fits = splits.patch_fits((6, 5), 1)
    assert fits.sum() == 4 * 3 and not fits[0].any() and not fits[:, -1].any()


def test_balanced_scaffold_split_keeps_both_classes_where_the_plain_one_does_not() -> None:
    """A BBBP-like table in file order: large scaffold sets of both classes, then singleton
    scaffolds, the negative ones first. The deterministic split fills train with the large sets
    and the first singletons, so val and test get positives only; the balanced split deals the
    singletons at random."""
    scaffolds = [f"big{k}" for k in range(6) for _ in range(100)] + [f"single{k}" for k in range(400)]
    labels = np.array([k % 2 for k in range(6) for _ in range(100)] + [0] * 200 + [1] * 200)
    fractions = {"train": 0.8, "val": 0.1, "test": 0.1}
    plain = splits.scaffold_split(scaffolds, fractions)
    assert set(labels[plain["val"]].tolist()) == set(labels[plain["test"]].tolist()) == {1}
    balanced = splits.balanced_scaffold_split(scaffolds, fractions, seed=0)
    assert_partition(balanced, len(scaffolds))
    for name, part in balanced.items():
        assert set(labels[part].tolist()) == {0, 1}, name
        assert len(part) == round(len(scaffolds) * fractions[name])
    sets = {k: {scaffolds[i] for i in v} for k, v in balanced.items()}
    assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"])
    assert {f"big{k}" for k in range(6)} <= sets["train"]  # sets over half of val's size go first
    again = splits.balanced_scaffold_split(scaffolds, fractions, seed=0)
    other = splits.balanced_scaffold_split(scaffolds, fractions, seed=1)
    assert np.array_equal(again["test"], balanced["test"]) and not np.array_equal(other["test"], balanced["test"])
