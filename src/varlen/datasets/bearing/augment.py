"""Training-window augmentation drawn from `(seed, epoch, window)` only: shifts, speed, amplitude, noise.

What generalises across operating conditions is a fault's signature, not where a window
starts, how fast the shaft turns, how loud the machine is or how clean the sensor: so a
training window moves by up to `shift` samples inside its split's block (never into a gap or
another split), is read at a speed factor in `[1 - speed, 1 + speed]` (resampled with a
Lanczos-3 kernel, flat up to about 0.4 cycles per sample, so a 3 kHz resonance at 12 kHz keeps
its amplitude: a load that slows the shaft scales every fault frequency the same way), its
amplitude is scaled by a factor in `[1 - scale, 1 + scale]`, and white noise of a standard
deviation drawn in `[0, noise]` is added to its real samples (padding stays zero).

Every draw comes from a counter-based hash of (seed, epoch, window index, draw number)
(`varlen.prepare.draws.counter_bits`, as the hyperspectral band draws): a window gets the same
draws in whatever batch, worker or rank it lands, a resumed run replays them exactly, and each
epoch draws new ones. A batch is one `[B, k]` hash, no loop per window. Training batches carry
their epoch (`EpochIndices`, from `EpochBatchSampler`)
into the dataset's fetch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from varlen.datasets.bearing.storage import standardize
from varlen.prepare.draws import counter_bits, unit_floats

__all__ = ["WindowAugment"]

_NAME = "bearing window augmentation"
#: draw numbers: 0 the shift, 1 the scale, 2 the noise level, 3 the speed; the noise of (channel c,
#: position p) is draw `_NOISE + c * 2**32 + p`: it does not depend on how wide the window's batch is
_SHIFT, _SCALE, _LEVEL, _SPEED, _NOISE = 0, 1, 2, 3, 1 << 48
#: the Lanczos-3 neighbours of a resampled position, relative to the sample at or before it
_TAPS = np.arange(-2, 4)


def _uniforms(seed: int, epoch: int, indices: np.ndarray, number: int) -> np.ndarray:
    """`[B]` float64 uniforms in `[0, 1)`: draw `number` of each window `indices[b]` in `epoch`."""
    return unit_floats(counter_bits(_NAME, seed, epoch, indices, np.array(number)))


@dataclass(frozen=True)
class WindowAugment:
    """Random shifts, amplitude scaling and noise of training windows (see the module docstring).

    Attributes:
        seed: the DataModule's seed.
        shift: most samples a window moves either way (0: none).
        scale: amplitude factors are uniform in `[1 - scale, 1 + scale]` (0: none).
        noise: the largest standard deviation of the added white noise (each window's is uniform
            in `[0, noise]`), in the signal's (normalized) units.
        speed: speed factors are uniform in `[1 - speed, 1 + speed]` (0: none); a window of
            `n` samples then reads about `n * factor` samples of its recording (plus the
            kernel's 2 before and 3 after).
    """

    seed: int
    shift: int = 0
    scale: float = 0.0
    noise: float = 0.0
    speed: float = 0.0

    def __post_init__(self) -> None:
        if self.shift < 0 or not 0 <= self.scale < 1 or self.noise < 0 or not 0 <= self.speed < 0.5:
            raise ValueError(
                "augmentation needs shift >= 0, 0 <= scale < 1, noise >= 0 and 0 <= speed < 0.5; got "
                f"{self.shift}, {self.scale}, {self.noise}, {self.speed}"
            )

    @property
    def moves(self) -> bool:
        """Whether windows are read elsewhere than their own span (then they need their block's bounds)."""
        return bool(self.shift or self.speed)

    def place(
        self, indices: np.ndarray, epoch: int, starts: np.ndarray, lengths: np.ndarray, bounds: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each window is read: `(starts, spans, rates)`, `[start, start + span)` inside `bounds`.

        Without speed changes a window reads its `n` samples from `start`. At speed factor
        `r` its first sample is at `start + 2` and it reads `floor((n - 1) * r) + 6` samples
        (the kernel's neighbours included); `r` is lowered where the block is too short.
        """
        rates, spans = np.ones(len(indices)), lengths
        if self.speed:
            u = _uniforms(self.seed, epoch, indices, _SPEED)
            room = (bounds[:, 1] - bounds[:, 0] - 6) / np.maximum(lengths - 1, 1)
            rates = np.minimum(1.0 + self.speed * (2.0 * u - 1.0), room)
            spans = np.floor((lengths - 1) * rates).astype(np.int64) + len(_TAPS)
        if self.shift:
            u = _uniforms(self.seed, epoch, indices, _SHIFT)
            starts = starts + np.floor(u * (2 * self.shift + 1)).astype(np.int64) - self.shift
        return np.clip(starts, bounds[:, 0], np.maximum(bounds[:, 1] - spans, bounds[:, 0])), spans, rates

    @staticmethod
    def resampled(
        values: np.ndarray,
        row_starts: np.ndarray,
        rates: np.ndarray,
        lengths: np.ndarray,
        width: int,
        normalization: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """`[B, C, width]` float32: row `(b, c)` of the flat `values` resampled at `rates[b]` input
        samples per output sample, output `k` at `row_starts[b, c] + 2 + k * rates[b]` (Lanczos-3
        weights, normalized to sum 1: a rate of exactly 1 copies the samples), zero after `lengths[b]`.
        With `normalization` (`(mean, std)` per channel) every sample read is standardized first,
        as if `values` were: the stored signal is read-only."""
        position = 2.0 + np.arange(width) * rates[:, None]  # [B, W], from each row's start
        left = np.floor(position).astype(np.int64)
        offset = np.pi * ((position - left).astype(np.float32)[..., None] - _TAPS.astype(np.float32))  # [B, W, 6]
        offset[np.abs(offset) < 1e-6] = 1e-6  # the limit at 0 is 1
        weights = 3 * np.sin(offset) * np.sin(offset / 3) / offset**2  # Lanczos-3: sinc(x) sinc(x / 3)
        weights /= weights.sum(axis=-1, keepdims=True)
        first = row_starts[:, :, None] + left[:, None, :]  # [B, C, W]
        out = np.zeros(first.shape, dtype=np.float32)
        for tap, step in enumerate(_TAPS.tolist()):  # six taps, each one read of the whole batch
            read = values.take(np.minimum(first + step, len(values) - 1))
            if normalization is not None:
                read = standardize(read, normalization)
            out += read * weights[:, None, :, tap]
        out *= (np.arange(width) < lengths[:, None])[:, None, :]
        return out

    def perturb(self, signals: np.ndarray, mask: np.ndarray, indices: np.ndarray, epoch: int) -> None:
        """Scale and add noise to a padded batch `[B, C, W]` in place; padded positions stay zero."""
        if self.scale:
            u = _uniforms(self.seed, epoch, indices, _SCALE)
            signals *= (1.0 + self.scale * (2.0 * u - 1.0)).astype(np.float32)[:, None, None]
        if self.noise:
            _, c, w = signals.shape
            bits = counter_bits(_NAME, self.seed, epoch, indices, _NOISE + (np.arange(c)[:, None] << 32) + np.arange(w))
            # Box-Muller on the two 32-bit halves of each draw: one hash per noise value
            radius = np.sqrt(-2.0 * np.log(((bits >> np.uint64(32)).astype(np.float32) + 0.5) * np.float32(2.0**-32)))
            angle = (bits & np.uint64(0xFFFFFFFF)).astype(np.float32) * np.float32(2.0 * np.pi * 2.0**-32)
            level = (self.noise * _uniforms(self.seed, epoch, indices, _LEVEL)).astype(np.float32)
            signals += level[:, None, None] * radius * np.cos(angle) * mask[:, None, :]
