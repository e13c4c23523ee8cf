"""Every split the scenarios use, as pure functions of their inputs and a seed.

One argument style throughout: `fractions` is a mapping from split name to share, checked by
`check_fractions` (names in the order the splits are dealt, shares summing to 1); results
are a `dict` from split name to sorted indices (or, for time blocks and spatial blocks, the
spans and masks that define them). Random decisions draw from *named streams*
(`stream`), so two decisions made from one seed are independent and adding a third never
shifts the first two (no `seed + 1` offsets).

One rule for a held-out split the data does not give, in every DataModule (`STANDS_IN`): a
validation split not given is carved from the training data (`val_fraction`); a test split not given
is carved only where a DataModule's `test_fraction` asks for one (molecules, bearing, hyperspectral:
one source, every split carved), else it is the validation split, and the report says so
(`test = val`; `stand_ins`). Nothing is carved that the user did not ask for. The one exception,
kept: video-text follows its source's own subsets (YouCook2's validation set is its test set, the protocol
its results are reported on) and carves a test split from a source without one.

Splits that cannot leak: `group_split` (whole recordings or videos), `keyed_split`
(random or stratified, every copy of a duplicate in one split), `time_block_split`
(non-overlapping blocks of each recording with gaps), `condition_split` (operating
conditions held out), `scaffold_split` (no Bemis-Murcko scaffold in two splits) and
`spatial_block_split` (no pixel in two splits' patches).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "STANDS_IN",
    "SpatialSplit",
    "balanced_scaffold_split",
    "check_fractions",
    "condition_split",
    "footprint_map",
    "fractions_of",
    "group_split",
    "inside_territory",
    "keyed_split",
    "patch_fits",
    "random_split",
    "scaffold_split",
    "spatial_block_split",
    "stand_ins",
    "stratified_split",
    "stream",
    "time_block_split",
]

Fractions = Mapping[str, float]
#: a held-out split the data does not give (nor a fraction carve) -> the split that stands in for it
STANDS_IN = {"test": "val"}


# -- fractions and random streams -----------------------------------------------------------------


def check_fractions(fractions: Fractions) -> dict[str, float]:
    """`fractions` as a dict, refused unless every share is in [0, 1], one is > 0 and they sum to 1."""
    out = {str(k): float(v) for k, v in dict(fractions).items()}
    if not out:
        raise ValueError("give at least one split fraction")
    bad = {k: v for k, v in out.items() if not 0.0 <= v <= 1.0}
    if bad:
        raise ValueError(f"split fractions must each be in [0, 1], got {bad}")
    if abs(sum(out.values()) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, got {out} (sum {sum(out.values()):g})")
    if max(out.values()) == 0:
        raise ValueError(f"at least one split fraction must be > 0, got {out}")
    return out


def fractions_of(val: float, test: float = 0.0) -> dict[str, float]:
    """`{"train": 1 - val - test, "val": val, "test": test}` (test left out when 0), checked."""
    if not (0.0 < val < 1.0 and 0.0 <= test < 1.0 and val + test < 1.0):
        raise ValueError(f"need 0 < val_fraction, 0 <= test_fraction and their sum < 1; got {val}, {test}")
    out = {"train": 1.0 - val - test, "val": val}
    if test > 0:
        out["test"] = test
    return check_fractions(out)


def stand_ins(splits: Mapping[str, object]) -> dict[str, str]:
    """Which split stands in for which (`STANDS_IN`): each missing one whose stand-in exists, and each
    that is its stand-in already (the same object: text's test split is its validation set)."""
    return {
        split: other
        for split, other in STANDS_IN.items()
        if other in splits and (split not in splits or splits[split] is splits[other])
    }


def stream(seed: int, name: str) -> np.random.Generator:
    """The random generator of decision `name` under `seed`: independent of every other name."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def _counts(n: int, fractions: dict[str, float]) -> dict[str, int]:
    """`n` items dealt by `fractions`, rounded by largest remainder so that they add up to `n`."""
    raw = {k: f * n for k, f in fractions.items()}
    counts = {k: int(np.floor(v)) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: -(raw[k] - counts[k]))[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def _one_in_each(counts: dict[str, int], wanted: Sequence[str]) -> None:
    """Give each split of `wanted` that got none one item, taken from the split that has the most."""
    for k in wanted:
        while counts[k] == 0:
            donor = max(counts, key=counts.get)
            counts[donor] -= 1
            counts[k] += 1


def _deal(order: np.ndarray, counts: Mapping[str, int]) -> dict[str, np.ndarray]:
    out, start = {}, 0
    for name, count in counts.items():
        out[name] = np.sort(order[start : start + count])
        start += count
    return out


# -- samples, classes and groups ----------------------------------------------------------------


def random_split(n: int, fractions: Fractions, seed: int, name: str = "random split") -> dict[str, np.ndarray]:
    """Indices `0..n-1` dealt at random (stream `name`) by `fractions`."""
    fractions = check_fractions(fractions)
    return _deal(stream(seed, name).permutation(n), _counts(n, fractions))


def stratified_split(
    labels: Sequence | np.ndarray, fractions: Fractions, seed: int, name: str = "stratified split"
) -> dict[str, np.ndarray]:
    """Indices dealt by `fractions` within every class, so that each split keeps the class mix.

    A class with at least as many members as there are splits with a share > 0 puts at least one
    member in each of them (a rare class still appears in validation).
    """
    fractions = check_fractions(fractions)
    labels = np.asarray(labels)
    rng = stream(seed, name)
    wanted = [k for k, f in fractions.items() if f > 0]
    parts: dict[str, list[np.ndarray]] = {k: [] for k in fractions}
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        counts = _counts(len(members), fractions)
        if len(members) >= len(wanted):
            _one_in_each(counts, wanted)
        for k, part in _deal(members, counts).items():
            parts[k].append(part)
    return {k: np.sort(np.concatenate(v)) if v else np.empty(0, np.int64) for k, v in parts.items()}


def group_split(
    groups: Sequence | np.ndarray,
    fractions: Fractions,
    seed: int,
    labels: Sequence | np.ndarray | None = None,
    name: str = "group split",
) -> dict[str, np.ndarray]:
    """Sample indices split so that every group (recording, video) lies in one split only.

    Groups are dealt by `fractions` at random, or stratified by `labels` (one per sample,
    constant within a group) so that each split keeps the class mix of the groups.
    """
    groups = np.asarray(groups)
    units, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    if labels is None:
        chosen = random_split(len(units), fractions, seed, name)
    else:
        labels = np.asarray(labels)
        unit_labels = labels[first]
        mixed = np.flatnonzero(labels != unit_labels[inverse])
        if mixed.size:
            i = int(mixed[0])
            raise ValueError(f"group {groups[i]!r} holds samples of several labels ({labels[i]!r}, ...)")
        chosen = stratified_split(unit_labels, fractions, seed, name)
    which = np.full(len(units), -1)
    for k, (_, part) in enumerate(chosen.items()):
        which[part] = k
    return {split: np.flatnonzero(which[inverse] == k) for k, split in enumerate(chosen)}


def keyed_split(
    keys: Sequence | np.ndarray,
    fractions: Fractions,
    seed: int,
    labels: Sequence | np.ndarray | None = None,
    name: str = "random split",
) -> dict[str, np.ndarray]:
    """Samples dealt at random (stratified by `labels` when given), every sample of one key in one split.

    A key is a sample's identity (a canonical SMILES, a text): duplicates never straddle train and
    test. With every key distinct this is exactly `random_split` (with `labels`,
    `stratified_split`) under the same `name`: the keys, in the order of their first
    sample, are shuffled as those shuffle samples, and each key's samples go whole to the first
    split (in `fractions`' order) with room left for them, else to the last. The shares count
    samples; a key's class is its first sample's label.
    """
    fractions = check_fractions(fractions)
    _, first, inverse = np.unique(np.asarray(keys), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # keys numbered by their first sample
    number = np.empty_like(order)
    number[order] = np.arange(len(order))
    key_of, firsts = number[inverse.reshape(-1)], first[order]
    sizes = np.bincount(key_of, minlength=len(firsts))
    rng = stream(seed, name)
    if labels is None:
        strata = [np.arange(len(firsts))]
    else:
        key_labels = np.asarray(labels)[firsts]
        strata = [np.flatnonzero(key_labels == cls) for cls in np.unique(key_labels)]
    names, wanted = list(fractions), [k for k, f in fractions.items() if f > 0]
    home = np.zeros(len(firsts), np.int64)
    for members in strata:
        members = rng.permutation(members)
        counts = _counts(int(sizes[members].sum()), fractions)
        if labels is not None and len(members) >= len(wanted):  # as stratified_split: one in each, if it can
            _one_in_each(counts, wanted)
        filled = dict.fromkeys(names, 0)
        for key in members:
            split = next((k for k in names[:-1] if filled[k] + sizes[key] <= counts[k]), names[-1])
            filled[split] += sizes[key]
            home[key] = names.index(split)
    return {split: np.flatnonzero(home[key_of] == k) for k, split in enumerate(names)}


def condition_split(
    conditions: Sequence | np.ndarray, test: Sequence[str], val: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Indices by operating condition: `test` conditions held out, `val` ones (if given) too.

    Returns `train` and `test` (and `val` when `val` is given); the caller carves a
    validation split from train otherwise.
    """
    conditions = np.asarray([str(c) for c in conditions])
    test, val = [str(c) for c in test], [str(c) for c in val or []]
    overlap = sorted(set(test) & set(val))
    if overlap:
        raise ValueError(f"conditions {overlap} are in both the val and the test conditions")
    present = sorted(set(conditions.tolist()))
    out = {"test": np.flatnonzero(np.isin(conditions, test))}
    if val:
        out["val"] = np.flatnonzero(np.isin(conditions, val))
    out["train"] = np.flatnonzero(~np.isin(conditions, test + val))
    empty = [k for k, v in out.items() if len(v) == 0]
    if empty:
        raise ValueError(
            f"conditions test={test}, val={val or None} leave no sample for {empty} (conditions present: {present})"
        )
    return {k: out[k] for k in ("train", "val", "test") if k in out}


def scaffold_split(scaffolds: Sequence[str], fractions: Fractions) -> dict[str, np.ndarray]:
    """Deterministic Bemis-Murcko scaffold split: whole scaffold sets go to one split.

    Sets are taken largest first (ties: the set whose first molecule comes first) and fill the
    splits in the order of `fractions` (train, then validation, then test): train holds the
    common scaffolds and test molecules have scaffolds never seen in training (the MoleculeNet /
    DeepChem convention).
    """
    fractions = check_fractions(fractions)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, scaffold in enumerate(scaffolds):
        groups[scaffold].append(i)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    targets = _counts(len(scaffolds), fractions)
    names = list(fractions)
    parts: dict[str, list[int]] = {k: [] for k in names}
    for group in ordered:
        home = next((k for k in names[:-1] if len(parts[k]) + len(group) <= targets[k]), names[-1])
        parts[home] += group
    return {k: np.sort(np.asarray(v, np.int64)) for k, v in parts.items()}


def balanced_scaffold_split(
    scaffolds: Sequence[str], fractions: Fractions, seed: int, name: str = "balanced scaffold split"
) -> dict[str, np.ndarray]:
    """Bemis-Murcko scaffold split that keeps validation and test like the whole set.

    The deterministic `scaffold_split` fills train with the largest scaffold sets and leaves
    the rest, often singletons of one kind, to validation and test: on MoleculeNet's BBBP in its
    file order both came out with one class only. Here (the "balanced" scaffold split of chemprop
    and astartes) the scaffold sets larger than half of the smallest non-train split go first,
    then all the others, each group in a seeded random order (stream `name`), and sets are dealt
    in that order to the first split with room for them. No scaffold is in two splits.
    """
    fractions = check_fractions(fractions)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, scaffold in enumerate(scaffolds):
        groups[scaffold].append(i)
    targets = _counts(len(scaffolds), fractions)
    names = list(fractions)
    held = [targets[k] for k in names[1:] if targets[k] > 0]
    limit = min(held) / 2 if held else float("inf")
    sets = sorted(groups.values(), key=lambda g: g[0])  # a canonical order before shuffling
    rng = stream(seed, name)
    big = [sets[i] for i in rng.permutation(len(sets)) if len(sets[i]) > limit]
    small = [sets[i] for i in rng.permutation(len(sets)) if len(sets[i]) <= limit]
    parts: dict[str, list[int]] = {k: [] for k in names}
    for group in big + small:
        home = next((k for k in names[:-1] if len(parts[k]) + len(group) <= targets[k]), names[-1])
        parts[home] += group
    return {k: np.sort(np.asarray(v, np.int64)) for k, v in parts.items()}


# -- time blocks ----------------------------------------------------------------------------------


def time_block_split(
    lengths: Sequence[int] | np.ndarray, fractions: Fractions, gap: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Contiguous blocks of every recording, in time order, separated by `gap` unused samples.

    The first split of `fractions` (train) starts at 0 and takes what the others leave; each
    later split takes `max(1, round(length * fraction))` samples, the last one ending at the
    recording's end. Returns `(start, end)` per recording for each split.
    """
    fractions = check_fractions(fractions)
    if gap < 0:
        raise ValueError(f"gap must be >= 0 samples (a negative gap makes splits overlap), got {gap}")
    lengths = np.asarray(lengths, dtype=np.int64)
    names = list(fractions)
    ends = lengths.copy()
    blocks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in reversed(names[1:]):
        size = np.maximum(1, np.round(lengths * fractions[name]).astype(np.int64))
        blocks[name] = (ends - size, ends)
        ends = ends - size - gap
    blocks[names[0]] = (np.zeros_like(ends), ends)
    return {name: blocks[name] for name in names}


# -- spatial blocks -----------------------------------------------------------------------------


def patch_fits(shape: tuple[int, int], radius: int) -> np.ndarray:
    """Pixels whose `(2r+1)^2` patch lies inside the image (patches are views: no padding)."""
    h, w = shape
    ok = np.zeros(shape, dtype=bool)
    ok[radius : h - radius, radius : w - radius] = True
    return ok


def inside_territory(territory: np.ndarray, split: int, buffer: int) -> np.ndarray:
    """Pixels whose every neighbour within Chebyshev distance `buffer` belongs to `split`."""
    own = territory == split
    if buffer == 0:
        return own
    from scipy import ndimage  # here, not at the top: the spatial split is the hyperspectral extra's only

    return ndimage.minimum_filter(own.astype(np.uint8), size=2 * buffer + 1, mode="nearest").astype(bool)


def footprint_map(centres: np.ndarray, radius: int) -> np.ndarray:
    """Pixels covered by the `(2r+1)^2` patch of any centre."""
    if radius == 0:
        return centres.copy()
    from scipy import ndimage  # the hyperspectral extra's (see inside_territory)

    return ndimage.maximum_filter(centres.astype(np.uint8), size=2 * radius + 1, mode="constant").astype(bool)


@dataclass(frozen=True)
class SpatialSplit:
    """Result of `spatial_block_split`.

    Attributes:
        masks: split name -> boolean `[H, W]` map of its patch centres.
        territory: `[H, W]` int8 index (in `masks` order) of the split owning each pixel's block,
            -1 where no block holds a labelled pixel.
        unused: split name -> labelled pixels of its blocks that are not centres, by reason:
            `"border"` (the patch leaves the image) and `"buffer"` (within `buffer` of
            another split).
    """

    masks: dict[str, np.ndarray]
    territory: np.ndarray
    unused: dict[str, dict[str, int]]


def spatial_block_split(
    labels: np.ndarray, fractions: Fractions, block_size: int, buffer: int, radius: int, seed: int
) -> SpatialSplit:
    """Spatially disjoint split of labelled pixels into blocks, stratified per class where blocks allow.

    Blocks of `block_size` pixels are dealt one at a time to the split whose per-class deficit
    (target share minus what it already holds) the block reduces most; blocks holding a large
    share of a rare class go first, the rest in a random order (stream `"spatial blocks"`).
    A pixel is a centre of split `s` only when every pixel within `buffer` of it lies in
    `s`'s blocks and its patch fits in the image, so with `buffer >= radius` the patch
    footprints of different splits share no pixel.

    Args:
        labels: `[H, W]`, 0 = unlabelled, 1..C.
        fractions: target share of labelled pixels per split.
        block_size: block side in pixels.
        buffer: margin kept free of centres at a block edge that borders another split.
        radius: patch radius (centres whose patch leaves the image are not used).
        seed: seed of the block order.
    """
    fractions = check_fractions(fractions)
    if buffer < radius:
        raise ValueError(
            f"buffer {buffer} is smaller than the patch radius {radius}: train and test patches would overlap"
        )
    if block_size <= 2 * buffer:
        raise ValueError(f"block_size {block_size} must exceed twice the buffer ({buffer}), or no centre survives")
    h, w = labels.shape
    num_classes = int(labels.max(initial=0))
    # int32 / int8 maps: a large scene's [H, W] temporaries stay small (they set setup's peak memory)
    nbx = -(-w // block_size)
    block = (np.arange(h, dtype=np.int32) // block_size)[:, None] * nbx + np.arange(w, dtype=np.int32) // block_size
    num_blocks = int(block[-1, -1]) + 1
    cell_dtype = np.int32 if num_blocks * (num_classes + 1) < 2**31 else np.int64
    cells = block.astype(cell_dtype, copy=False) * (num_classes + 1) + labels.astype(cell_dtype, copy=False)
    hist = np.bincount(cells.ravel(), minlength=num_blocks * (num_classes + 1)).reshape(num_blocks, -1)[:, 1:]
    del cells
    totals = hist.sum(0).astype(np.float64)
    targets = np.asarray(list(fractions.values()), dtype=np.float64)[:, None] * totals[None, :]
    got = np.zeros_like(targets)
    owner = np.full(num_blocks, -1, dtype=np.int8)
    share = (hist / np.maximum(totals, 1.0)).max(1) + stream(seed, "spatial blocks").uniform(0.0, 0.05, num_blocks)
    order = np.argsort(-share, kind="stable")
    for b in order[hist.sum(1)[order] > 0]:  # one step per block, never per pixel
        need = (targets - got) / np.maximum(totals, 1.0)
        s = int(np.argmax((need * hist[b]).sum(1)))
        owner[b] = s
        got[s] += hist[b]
    territory = owner[block]
    fits = patch_fits((h, w), radius)
    masks, unused = {}, {}
    for s, name in enumerate(fractions):
        own = (territory == s) & (labels > 0)
        inside = inside_territory(territory, s, buffer)
        masks[name] = own & inside & fits
        unused[name] = {"border": int((own & ~fits).sum()), "buffer": int((own & fits & ~inside).sum())}
    return SpatialSplit(masks, territory, unused)
