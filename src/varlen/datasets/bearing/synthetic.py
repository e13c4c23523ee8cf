"""The embedded default: a physical simulator of a 6205 drive-end bearing, offline and deterministic.

Shaft harmonics, fault impulses at the bearing's characteristic frequencies (BPFO, BPFI, BSF)
ringing a structural resonance, amplitude growing with fault size, and sensor noise: enough
physics that a WDCNN must learn fault signatures, not recording identities.

The motor load is the operating condition. It sets the shaft speed (CWRU's 1797-1730 rpm for
0-3 HP), so every fault frequency moves with it; with `load_effects` it also does what a
heavier radial load does to a bearing: harder impacts, a deeper load-zone modulation, stronger
shaft harmonics, a slightly stiffer (higher) resonance, more noise. That is what makes the
cross-condition protocol (train on one load, test on another) testable offline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import scipy.signal

from varlen.datasets.bearing.formats import CWRU_CLASSES, Recording

__all__ = [
    "BPFI",
    "BPFO",
    "BSF",
    "CWRU_LOAD_RPM",
    "FTF",
    "SPEED_ONLY",
    "LoadEffects",
    "load_effects",
    "iter_simulated",
    "simulate_recording",
    "simulate_recordings",
]

CWRU_LOAD_RPM = {0: 1797.0, 1: 1772.0, 2: 1750.0, 3: 1730.0}
# SKF 6205-2RS JEM (the CWRU drive-end bearing): 9 balls, ball diameter 0.3126 in, pitch
# diameter 1.537 in, contact angle 0. Fault frequencies in multiples of the shaft frequency.
BALLS, BALL_D, PITCH_D = 9, 0.3126, 1.537
_RATIO = BALL_D / PITCH_D
BPFO = BALLS / 2 * (1 - _RATIO)  # outer race: 3.5848
BPFI = BALLS / 2 * (1 + _RATIO)  # inner race: 5.4152
BSF = PITCH_D / BALL_D * (1 - _RATIO**2)  # ball spin x2 (a spall hits both races): 4.7135
FTF = (1 - _RATIO) / 2  # cage: 0.3983
_SIMULATED_CLASS = re.compile(r"^(normal|(IR|B|OR)\d{3})$")


class LoadEffects(NamedTuple):
    """How a load changes a recording besides the speed (factors against the unloaded motor).

    Attributes:
        impact: gain of the fault impacts (contact force grows with the radial load).
        shaft: gain of the 1x/2x shaft harmonics.
        zone_depth: depth of the load-zone modulation of inner-race and ball impacts.
        noise: standard deviation of the white sensor noise.
        resonance: factor on the structural resonance frequency (stiffer contacts).
    """

    impact: float
    shaft: float
    zone_depth: float
    noise: float
    resonance: float


#: the default simulator's physics: the load sets the shaft speed and nothing else
SPEED_ONLY = LoadEffects(impact=1.0, shaft=1.0, zone_depth=0.6, noise=0.08, resonance=1.0)


def load_effects(load: int) -> LoadEffects:
    """The effects of `load` HP (0-3): +15% impact and +25% shaft harmonics per HP, a deeper load
    zone, +10% noise and a 1.5% higher resonance per HP. Load 0 is `SPEED_ONLY`."""
    return LoadEffects(
        impact=1.0 + 0.15 * load,
        shaft=1.0 + 0.25 * load,
        zone_depth=min(0.6 + 0.1 * load, 0.95),
        noise=0.08 * (1.0 + 0.1 * load),
        resonance=1.0 + 0.015 * load,
    )


def simulate_recording(
    label: str,
    sampling_rate: int,
    seconds: float,
    load: int,
    rng: np.random.Generator,
    name: str = "sim",
    effects: LoadEffects = SPEED_ONLY,
) -> Recording:
    """A drive-end accelerometer recording of a 6205 bearing with the given fault.

    Physics, simplified: the shaft turns at the load's RPM (CWRU speeds, +-0.3%) and adds its
    1x/2x harmonics; a fault (`IR`, `B`, `OR` + size in mils) strikes once per pass at
    BPFI, BSF or BPFO times the shaft frequency, with 1% slip jitter; each strike rings a
    structural resonance (about 3 kHz, 6% damping) with an amplitude proportional to the fault
    size; inner-race strikes are modulated by the shaft turn (the fault moves through the load
    zone) and ball strikes by the cage. White sensor noise on top. `effects` scales these
    with the load (`load_effects`); the default changes the speed only.
    """
    n = max(1, int(round(seconds * sampling_rate)))
    rpm = CWRU_LOAD_RPM[load] * (1 + rng.normal(0, 0.003))
    shaft = rpm / 60
    t = np.arange(n) / sampling_rate
    phase = rng.uniform(0, 2 * np.pi, 2)
    x = (0.05 * effects.shaft) * np.sin(2 * np.pi * shaft * t + phase[0])
    x += (0.02 * effects.shaft) * np.sin(4 * np.pi * shaft * t + phase[1])
    x += effects.noise * rng.standard_normal(n)
    if label != "normal":
        fault, size = label[:-3], int(label[-3:])
        rate_multiple = {"IR": BPFI, "B": BSF, "OR": BPFO}[fault]
        period = sampling_rate / (rate_multiple * shaft)
        hits = np.arange(int(n / period) + 1) * period + rng.uniform(0, period)
        hits = hits + rng.normal(0, 0.01 * period, len(hits))
        hits = hits[(hits >= 0) & (hits < n)]
        amplitude = 0.25 * size / 7 * rng.lognormal(0, 0.1) * (1 + 0.1 * rng.standard_normal(len(hits)))
        amplitude = amplitude * effects.impact
        hit_t = hits / sampling_rate
        if fault == "IR":
            amplitude = amplitude * (1 + effects.zone_depth * np.cos(2 * np.pi * shaft * hit_t + phase[0]))
        elif fault == "B":
            amplitude = amplitude * (1 + effects.zone_depth * np.cos(2 * np.pi * FTF * shaft * hit_t))
        impulses = np.zeros(n)
        np.add.at(impulses, hits.astype(np.int64), amplitude)
        resonance, damping = 3000.0 * effects.resonance * (1 + rng.normal(0, 0.02)), 0.06
        k = np.arange(int(6 / (damping * 2 * np.pi * resonance) * sampling_rate) + 1) / sampling_rate
        kernel = np.exp(-damping * 2 * np.pi * resonance * k) * np.sin(2 * np.pi * resonance * k)
        x += scipy.signal.oaconvolve(impulses, kernel)[:n]
    return Recording(x[None, :].astype(np.float32), float(sampling_rate), label, name, str(load), rpm, "simulator")


def simulate_recordings(
    per_class: int = 4,
    seed: int = 0,
    seconds: tuple[float, float] = (2.0, 20.0),
    sampling_rates: Sequence[int] = (12000, 48000),
    class_names: Sequence[str] = CWRU_CLASSES,
    loads: Sequence[int] | None = None,
) -> list[Recording]:
    """Simulated recordings of the CWRU classes, deterministic in `seed`.

    Durations are log-normal (median 5 s, long right tail) clipped to `seconds`; rates drawn
    from `sampling_rates`. `class_names` picks the classes simulated (`normal` or a
    drive-end fault `IR|B|OR` + size in mils, e.g. `OR021`).

    Args:
        per_class: recordings per class (per class and load when `loads` is given).
        seed: the seed of every draw.
        seconds: the range durations are clipped to.
        sampling_rates: rates drawn from.
        class_names: the classes.
        loads: None (the default): `per_class` recordings per class, each at a random load 0-3
            that sets its speed only (the simulator's original output, unchanged). A list of
            loads (e.g. `[0, 1, 2, 3]`): `per_class` recordings of every class under every
            load, with the load's full `load_effects`: the same classes under several
            operating conditions, for cross-condition splits.

    Raises:
        ValueError: a class the simulator has no physics for, or a load outside 0-3.
    """
    return list(iter_simulated(per_class, seed, seconds, sampling_rates, class_names, loads))


def iter_simulated(
    per_class: int = 4,
    seed: int = 0,
    seconds: tuple[float, float] = (2.0, 20.0),
    sampling_rates: Sequence[int] = (12000, 48000),
    class_names: Sequence[str] = CWRU_CLASSES,
    loads: Sequence[int] | None = None,
) -> Iterator[Recording]:
    """`simulate_recordings` one recording at a time (the same recordings, in the same order),
    so that a cache is written as they come and memory holds one of them.

    Raises:
        ValueError: as `simulate_recordings`, before the first recording.
    """
    unknown = [c for c in class_names if not _SIMULATED_CLASS.match(c)]
    if unknown:
        raise ValueError(
            f"the simulator has no model for classes {unknown}: use 'normal' or IR/B/OR + a 3-digit size in mils"
        )
    bad = [load for load in loads or () if load not in CWRU_LOAD_RPM]
    if loads is not None and (bad or not loads):
        raise ValueError(f"simulated loads must be among {sorted(CWRU_LOAD_RPM)} HP, got {list(loads)}")
    return _simulated(per_class, np.random.default_rng(seed), seconds, sampling_rates, class_names, loads)


def _simulated(
    per_class: int,
    rng: np.random.Generator,
    seconds: tuple[float, float],
    sampling_rates: Sequence[int],
    class_names: Sequence[str],
    loads: Sequence[int] | None,
) -> Iterator[Recording]:
    """Without `loads`: `per_class` recordings per class, each at a random load that sets its speed
    only (`sim_<label>_<i>`); with `loads`: of every class under every load, with its effects
    (`sim_<label>_<load>hp_<i>`)."""
    if loads is None:
        for label in class_names:
            for i in range(per_class):
                duration = float(np.clip(rng.lognormal(np.log(5.0), 0.7), *seconds))
                rate = int(rng.choice(sampling_rates))
                load = int(rng.integers(0, 4))
                yield simulate_recording(label, rate, duration, load, rng, name=f"sim_{label}_{i}")
        return
    for load in dict.fromkeys(int(x) for x in loads):  # in the given order, once each
        effects = load_effects(load)
        for label in class_names:
            for i in range(per_class):
                duration = float(np.clip(rng.lognormal(np.log(5.0), 0.7), *seconds))
                rate = int(rng.choice(sampling_rates))
                name = f"sim_{label}_{load}hp_{i}"
                yield simulate_recording(label, rate, duration, load, rng, name, effects)
