"""The embedded default: a physical simulator of a 6205 drive-end bearing, offline and deterministic.

Shaft harmonics, fault impulses at the bearing's characteristic frequencies (BPFO, BPFI, BSF)
ringing a structural resonance, amplitude growing with fault size, and sensor noise: enough
physics that a WDCNN must learn fault signatures, not recording identities.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.signal

from varlen.datasets.bearing.formats import CWRU_CLASSES, Recording

__all__ = ["BPFI", "BPFO", "BSF", "CWRU_LOAD_RPM", "FTF", "simulate_recording", "simulate_recordings"]

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


def simulate_recording(
    label: str,
    sampling_rate: int,
    seconds: float,
    load: int,
    rng: np.random.Generator,
    name: str = "sim",
) -> Recording:
    """A drive-end accelerometer recording of a 6205 bearing with the given fault.

    Physics, simplified: the shaft turns at the load's RPM (CWRU speeds, +-0.3%) and adds its
    1x/2x harmonics; a fault (``IR``, ``B``, ``OR`` + size in mils) strikes once per pass at
    BPFI, BSF or BPFO times the shaft frequency, with 1% slip jitter; each strike rings a
    structural resonance (about 3 kHz, 6% damping) with an amplitude proportional to the fault
    size; inner-race strikes are modulated by the shaft turn (the fault moves through the load
    zone) and ball strikes by the cage. White sensor noise on top.
    """
    n = max(1, int(round(seconds * sampling_rate)))
    rpm = CWRU_LOAD_RPM[load] * (1 + rng.normal(0, 0.003))
    shaft = rpm / 60
    t = np.arange(n) / sampling_rate
    phase = rng.uniform(0, 2 * np.pi, 2)
    x = 0.05 * np.sin(2 * np.pi * shaft * t + phase[0]) + 0.02 * np.sin(4 * np.pi * shaft * t + phase[1])
    x += 0.08 * rng.standard_normal(n)
    if label != "normal":
        fault, size = label[:-3], int(label[-3:])
        rate_multiple = {"IR": BPFI, "B": BSF, "OR": BPFO}[fault]
        period = sampling_rate / (rate_multiple * shaft)
        hits = np.arange(int(n / period) + 1) * period + rng.uniform(0, period)
        hits = hits + rng.normal(0, 0.01 * period, len(hits))
        hits = hits[(hits >= 0) & (hits < n)]
        amplitude = 0.25 * size / 7 * rng.lognormal(0, 0.1) * (1 + 0.1 * rng.standard_normal(len(hits)))
        hit_t = hits / sampling_rate
        if fault == "IR":
            amplitude = amplitude * (1 + 0.6 * np.cos(2 * np.pi * shaft * hit_t + phase[0]))
        elif fault == "B":
            amplitude = amplitude * (1 + 0.6 * np.cos(2 * np.pi * FTF * shaft * hit_t))
        impulses = np.zeros(n)
        np.add.at(impulses, hits.astype(np.int64), amplitude)
        resonance, damping = 3000.0 * (1 + rng.normal(0, 0.02)), 0.06
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
) -> list[Recording]:
    """``per_class`` simulated recordings per CWRU class, deterministic in ``seed``.

    Durations are log-normal (median 5 s, long right tail) clipped to ``seconds``; rates drawn
    from ``sampling_rates``; motor loads 0-3 (the condition). ``class_names`` picks the classes
    simulated (``normal`` or a drive-end fault ``IR|B|OR`` + size in mils, e.g. ``OR021``).

    Raises:
        ValueError: a class the simulator has no physics for.
    """
    unknown = [c for c in class_names if not _SIMULATED_CLASS.match(c)]
    if unknown:
        raise ValueError(
            f"the simulator has no model for classes {unknown}: use 'normal' or IR/B/OR + a 3-digit size in mils"
        )
    rng = np.random.default_rng(seed)
    recordings = []
    for label in class_names:
        for i in range(per_class):
            duration = float(np.clip(rng.lognormal(np.log(5.0), 0.7), *seconds))
            rate = int(rng.choice(sampling_rates))
            load = int(rng.integers(0, 4))
            recordings.append(simulate_recording(label, rate, duration, load, rng, name=f"sim_{label}_{i}"))
    return recordings
