"""MixtureSchedule: stages parsed and checked, the shares at every position, and interpolation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from varlen.batching.schedule import MixtureSchedule, is_schedule

NAMES = ("main", "web")


def parse(value):
    return MixtureSchedule.parse(value, NAMES, "Owner")


@pytest.mark.parametrize("weights", [[3, 1], {"main": 3, "web": 1}, np.array([3, 1]), [np.int64(3), np.float32(1)]])
def test_one_set_of_weights_is_a_constant_schedule(weights) -> None:
    schedule = parse(weights)
    assert not is_schedule(weights) and schedule.constant
    for position in (0, 5, 10**9):
        np.testing.assert_allclose(schedule.shares_at(position), [0.75, 0.25])


def test_step_stages_hold_until_their_end_and_the_last_to_the_run_end() -> None:
    schedule = parse([{"weights": [9, 1], "until_epoch": 2}, {"weights": {"main": 1, "web": 1}}])
    assert schedule.unit == "epoch" and not schedule.constant
    assert [schedule.stage_at(e) for e in range(5)] == [0, 0, 1, 1, 1]
    np.testing.assert_allclose([schedule.shares_at(e)[0] for e in range(4)], [0.9, 0.9, 0.5, 0.5])
    assert schedule.describe() == "until epoch 2: main 0.9, web 0.1; then: main 0.5, web 0.5"


def test_linear_moves_from_each_stage_to_the_next_reaching_it_at_the_end() -> None:
    value = {"stages": [{"weights": [1, 0], "until_step": 100}, {"weights": [0, 1]}], "interpolate": "linear"}
    schedule = parse(value)
    assert schedule.unit == "step"
    np.testing.assert_allclose(
        [schedule.shares_at(s)[1] for s in (0, 25, 50, 99, 100, 500)], [0, 0.25, 0.5, 0.99, 1, 1]
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([{"weights": [1, 1]}, {"weights": [1, 0], "until_epoch": 3}], "stage 1 follows stage 0, which has no end"),
        ([{"weights": [1, 1], "until_epoch": 3}, {"weights": [1, 0], "until_epoch": 3}], "ends at 3, not after"),
        (
            [{"weights": [1, 1], "until_epoch": 2}, {"weights": [1, 0], "until_step": 9}],
            "mix until_epoch and until_step",
        ),
        ([{"weights": [1, 1], "until_epoch": 0}], "until_epoch must be an integer >= 1"),
        ([{"weights": [1, 1], "until_epoch": 2, "until_step": 3}], "a stage takes weights and one of"),
        ([{"weights": [1, 2, 3], "until_epoch": 2}], "stage 0: 3 weights for 2 sources"),
        ([{"weights": {"main": 1}, "until_epoch": 2}], "missing: ['web']"),
        ([{"weights": [0, 0]}], "weights are all zero"),
        ([{"weights": [1, -1]}], "the weight of 'web' must be a finite number >= 0"),
        ([{"until_epoch": 2}], "stage 0 must be a mapping with weights"),
        ({"stages": [{"weights": [1, 1]}], "interpolate": "cubic"}, "interpolate must be one of"),
        ({"stages": [{"weights": [1, 1]}], "every": 2}, "sets ['every']"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_stage(value, said) -> None:
    with pytest.raises(ValueError, match="Owner: source_weights") as error:
        parse(value)
    assert said in str(error.value)


weights = st.lists(st.floats(0, 10), min_size=2, max_size=2).filter(lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(weights, st.integers(1, 5)), min_size=1, max_size=4), st.sampled_from(["step", "linear"]))
def test_shares_are_a_distribution_between_the_stages_own(stages, interpolate) -> None:
    ends = np.cumsum([gap for _, gap in stages]).tolist()
    value = {
        "stages": [{"weights": w, "until_epoch": e} for (w, _), e in zip(stages, ends, strict=True)],
        "interpolate": interpolate,
    }
    schedule = parse(value)
    own = [np.asarray(s.shares) for s in schedule.stages]
    for position in range(ends[-1] + 3):
        shares = schedule.shares_at(position)
        assert shares.sum() == pytest.approx(1) and (shares >= 0).all()
        k = schedule.stage_at(position)
        if interpolate == "step" or k == len(own) - 1:
            np.testing.assert_allclose(shares, own[k])
        else:  # between this stage's shares and the next's
            low, high = np.minimum(own[k], own[k + 1]), np.maximum(own[k], own[k + 1])
            assert ((shares >= low - 1e-9) & (shares <= high + 1e-9)).all()
