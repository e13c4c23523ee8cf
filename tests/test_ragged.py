"""varlen.batching.ragged: padded and packed gathers equal the per-sample reference."""

import numpy as np
import pytest
import torch

from varlen.batching.ragged import CHECK_CHUNK, Ragged, concat_ranges

RNG = np.random.default_rng(0)


def one_level(n: int = 40, trailing: tuple[int, ...] = ()) -> tuple[Ragged, list[np.ndarray]]:
    arrays = [RNG.normal(size=(int(k), *trailing)).astype(np.float32) for k in RNG.integers(0, 30, n)]
    return Ragged.from_arrays(arrays), arrays


def two_levels(n: int = 25) -> tuple[Ragged, list[list[np.ndarray]]]:
    samples = [[RNG.integers(1, 99, int(k)) for k in RNG.integers(1, 9, int(s))] for s in RNG.integers(0, 6, n)]
    rows = [row for sample in samples for row in sample]
    lengths = np.array([len(r) for r in rows], np.int64)
    groups = np.concatenate([[0], np.cumsum([len(s) for s in samples])])
    values = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    return Ragged(values, np.cumsum(lengths) - lengths, lengths, groups), samples


def test_concat_ranges_matches_the_loop() -> None:
    starts, lengths = np.array([5, 0, 9, 3]), np.array([2, 0, 3, 1])
    expected = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    assert np.array_equal(concat_ranges(starts, lengths), expected)


@pytest.mark.parametrize("trailing", [(), (3,)])
@pytest.mark.parametrize("multiple", [None, 8])
def test_pad_one_level_equals_the_per_sample_reference(trailing, multiple) -> None:
    ragged, arrays = one_level(trailing=trailing)
    batch = [3, 17, 0, 39, 8]
    out = ragged.pad(batch, pad_value=-1.0, pad_to_multiple_of=multiple)
    longest = max(len(arrays[i]) for i in batch)
    width = -(-longest // multiple) * multiple if multiple else longest
    assert out.values.shape == (len(batch), width, *trailing) and out.values.is_contiguous()
    for row, i in enumerate(batch):
        n = len(arrays[i])
        assert out.lengths[row] == n and out.mask[row].sum() == n and out.mask[row, :n].all()
        np.testing.assert_array_equal(out.values[row, :n].numpy(), arrays[i])
        assert (out.values[row, n:] == -1.0).all()


def test_pad_moves_the_ragged_axis_last_for_channel_first_signals() -> None:
    ragged, arrays = one_level(trailing=(2,))  # time-major storage [T, C]
    out = ragged.pad([1, 2], axis=-1)  # -> [B, C, L]
    assert out.values.shape[1] == 2 and out.values.is_contiguous()
    np.testing.assert_array_equal(out.values[0, :, : len(arrays[1])].numpy(), arrays[1].T)


def test_overlapping_spans_read_one_buffer_and_take_is_compact() -> None:
    signal = np.arange(100, dtype=np.float32)
    starts = np.arange(0, 100, 10)  # 50%-overlapping windows of 20, the last a tail of 10
    windows = Ragged(signal, starts=starts, lengths=np.minimum(20, 100 - starts))
    out = windows.pad([9, 0], pad_value=-1.0)
    np.testing.assert_array_equal(out.values[1].numpy(), signal[:20])
    np.testing.assert_array_equal(out.values[0, :10].numpy(), signal[90:])
    assert (out.values[0, 10:] == -1).all() and out.lengths.tolist() == [10, 20]
    compact = windows.take([9, 0])
    assert len(compact.values) == 30 and np.array_equal(compact.sizes, [10, 20])


def test_pack_one_level_round_trips() -> None:
    ragged, arrays = one_level(trailing=(3,))
    batch = [5, 1, 30]
    packed = ragged.pack(batch)
    cu = packed.cu_seqlens.numpy()
    assert cu.dtype == np.int32 and cu[-1] == sum(len(arrays[i]) for i in batch)
    for k, i in enumerate(batch):
        np.testing.assert_array_equal(packed.values[cu[k] : cu[k + 1]].numpy(), arrays[i])
        assert (packed.segment_ids[cu[k] : cu[k + 1]] == k).all()
    assert packed.max_len == max(len(arrays[i]) for i in batch) and packed.sample_rows is None


def test_two_levels_pad_and_pack_equal_the_reference() -> None:
    ragged, samples = two_levels()
    batch = [4, 0, 11, 24, 7]
    out = ragged.pad(batch, pad_value=0, pad_to_multiple_of=4, dtype=torch.long)
    depth = max(len(samples[i]) for i in batch)
    assert out.values.shape[:2] == (len(batch), depth) and out.values.dtype == torch.long
    assert out.values.shape[2] % 4 == 0
    packed = ragged.pack(batch)
    sample_rows, cu = packed.sample_rows.numpy(), packed.cu_seqlens.numpy()
    for b, i in enumerate(batch):
        assert out.rows[b] == len(samples[i]) and out.row_mask[b].sum() == len(samples[i])
        for s, row in enumerate(samples[i]):
            n = len(row)
            assert out.lengths[b, s] == n and out.mask[b, s].sum() == n
            np.testing.assert_array_equal(out.values[b, s, :n].numpy(), row)
            r = sample_rows[b] + s
            np.testing.assert_array_equal(packed.values[cu[r] : cu[r + 1]].numpy(), row)
        assert not out.mask[b, len(samples[i]) :].any()
    assert np.array_equal(ragged.sizes, [sum(map(len, s)) for s in samples])
    assert np.array_equal(ragged.longest_row, [max(map(len, s), default=0) for s in samples])


def test_bad_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        Ragged(np.zeros(5), starts=[0, 3], lengths=[2, 3])
    with pytest.raises(ValueError, match="groups"):
        Ragged(np.zeros(5), starts=[0, 2], lengths=[2, 3], groups=[0, 1])
    with pytest.raises(ValueError, match="empty batch"):
        Ragged.from_arrays([np.zeros(2)]).pad([])


def test_rows_are_checked_a_chunk_at_a_time_to_the_last_row() -> None:
    """The check reads the rows in chunks (bounded temporaries over a mapped corpus); a bad row or
    group in the last chunk is still found."""
    rows = CHECK_CHUNK * 2 + 5
    starts, lengths = np.arange(rows), np.ones(rows, np.int64)
    assert len(Ragged(np.zeros(rows), starts, lengths)) == rows
    lengths[-1] = 2
    with pytest.raises(ValueError, match="outside"):
        Ragged(np.zeros(rows), starts, lengths)
    groups = np.arange(rows + 1)
    groups[-2] = groups[-3] - 1
    with pytest.raises(ValueError, match="groups"):
        Ragged(np.zeros(rows), starts, np.ones(rows, np.int64), groups=groups)
