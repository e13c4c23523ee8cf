"""Sampling rates a vibration recording can plausibly have, and recordings resampled far more than the rest.

A rate typed in kHz (`12` for 12,000 Hz) is a valid positive number: resampled to 12 kHz, the
recording grows a thousandfold, and one 5 s recording supplied 41,011 of 41,054 training windows and a
232 MB cache. Rates outside `RATE_RANGE` are refused (`rate_problem`: the recording is bad
input, raised or counted). The range covers vibration data as it is recorded: CWRU 12 and 48 kHz,
Paderborn 64 kHz, MFPT about 49 and 98 kHz, IMS 20 kHz, XJTU-SY 25.6 kHz, the simulator 12 and 48 kHz;
any rate in kHz lies below it. Within the range, a recording whose resampling factor is more than
`FACTOR_SPREAD` times away from the median factor is warned about (`warn_outliers`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from varlen import notices

__all__ = ["FACTOR_SPREAD", "RATE_RANGE", "rate_problem", "resampling_outliers", "warn_outliers"]

#: the plausible sampling rates of a vibration recording, in Hz (both ends included)
RATE_RANGE = (1_000.0, 1_000_000.0)
#: how far (as a ratio, either way) a recording's resampling factor may be from the median factor unwarned
FACTOR_SPREAD = 4.0


def rate_problem(rate: float) -> str | None:
    """Why `rate` (Hz) is not a vibration recording's sampling rate (a generic reason), or None."""
    low, high = RATE_RANGE
    if low <= rate <= high:
        return None
    return f"sampling rate outside {low:,.0f}..{high:,.0f} Hz (a rate in kHz? give it in Hz)"


def resampling_outliers(rates: Sequence[float], target: float) -> tuple[np.ndarray, float]:
    """The positions of the recordings whose factor `target / rate` is more than `FACTOR_SPREAD`
    times away from the median factor, and that median."""
    factors = target / np.asarray(rates, dtype=np.float64)
    if not len(factors):
        return np.zeros(0, np.int64), 1.0
    median = float(np.median(factors))
    spread = np.maximum(factors / median, median / factors)
    return np.flatnonzero(spread > FACTOR_SPREAD), median


def warn_outliers(names: Sequence[str], rates: Sequence[float], target: float) -> None:
    """Warn (once per job) about the recordings `resampling_outliers` finds, naming them."""
    outliers, median = resampling_outliers(rates, target)
    if not len(outliers):
        return
    shown = ", ".join(f"{names[i]} ({rates[i]:,g} Hz: x{target / rates[i]:.3g})" for i in outliers[:3])
    more = f" and {len(outliers) - 3} more" if len(outliers) > 3 else ""
    notices.warn(
        f"{len(outliers)} recording(s) are resampled to {target:,g} Hz by a factor more than {FACTOR_SPREAD:g}x "
        f"away from the median factor x{median:.3g} of the {len(rates)} recordings: {shown}{more}; is a sampling "
        "rate wrong (a metadata CSV's sampling_rate column)?"
    )
