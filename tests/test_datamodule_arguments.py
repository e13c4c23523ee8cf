"""Every scenario hands the base's arguments on: each listed with the base's default, as the command line reads it.

A scenario declares only its own arguments and passes the rest to `VarLenDataModule.__init__` with `**kwargs`
(`varlen.datamodules.arguments`); these tests read each one through jsonargparse, as `varlen fit` does, and
fail for a subclass that stops handing them on or shadows a default.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from jsonargparse import ArgumentParser

import varlen.datamodules as datamodules
from varlen.datamodules import SCENARIOS
from varlen.datamodules.arguments import BASE_ARGS
from varlen.datamodules.base import VarLenDataModule

#: scenario -> base argument -> the default it declares instead of the base's (none today)
OVERRIDES: dict[str, dict[str, Any]] = {}
#: a value other than the default for each base argument a scenario takes, with the attribute that holds it
GIVEN = {"seed": 11, "num_buckets": 3, "timeout": 5.0, "predict_split": "val", "batch_size": 7}


def fixed(cls: type) -> set[str]:
    """The base arguments `cls` or a class between it and the base sets itself."""
    return {name for klass in cls.__mro__ for name in vars(klass).get("fixed_arguments", ())}


def parsed_defaults(cls: type) -> dict[str, Any]:
    """The arguments jsonargparse (`varlen fit --data.help`) lists for `cls`, with their defaults."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "data")
    return vars(parser.get_defaults()["data"])


def handed_on_problems(cls: type) -> list[str]:
    """What `cls` gets wrong about the base's arguments (empty: each listed with the base's default, or
    fixed by the class; given values reach the base)."""
    base = {name: p.default for name, p in inspect.signature(VarLenDataModule).parameters.items()}
    listed, overrides, skipped = parsed_defaults(cls), OVERRIDES.get(cls.__name__, {}), fixed(cls)
    problems = [f"{name} is fixed but listed" for name in sorted(skipped & set(listed))]
    for name in sorted(set(base) - skipped):
        expected = overrides.get(name, base[name])
        if name not in listed:
            problems.append(f"{name} is not listed")
        elif listed[name] != expected:
            problems.append(f"{name} defaults to {listed[name]!r}, the base to {expected!r}")
    if set(listed) != set(inspect.signature(cls).parameters):
        problems.append(f"its signature lists {sorted(set(inspect.signature(cls).parameters) ^ set(listed))} apart")
    return problems


def test_base_args_are_the_base_signature():
    assert BASE_ARGS == tuple(inspect.signature(VarLenDataModule).parameters)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_lists_every_base_argument_with_its_default(name):
    assert handed_on_problems(getattr(datamodules, name)) == []


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_given_base_arguments_reach_the_base(name):
    cls = getattr(datamodules, name)
    given = {k: v for k, v in GIVEN.items() if k not in fixed(cls)}
    dm = cls(**given)
    assert {k: getattr(dm, k) for k in given} == given
    assert {k: dm.hparams[k] for k in given} == given


class _Shadows(VarLenDataModule):
    """Shadows `seed`'s default.

    Args:
        seed: another default.
    """

    def __init__(self, seed: int = 1, **kwargs: Any) -> None:
        super().__init__(seed=seed, **kwargs)


class _Drops(VarLenDataModule):
    """Takes `**kwargs` but hands nothing on.

    Args:
        size: its own.
    """

    def __init__(self, size: int = 1, **kwargs: Any) -> None:
        super().__init__()


class _Withholds(VarLenDataModule):
    """Sets `stream` itself but says nothing of it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(stream=None, **kwargs)


def test_the_check_finds_a_shadowed_default_a_dropped_kwargs_and_an_unlisted_fixed_argument():
    assert handed_on_problems(_Shadows) == ["seed defaults to 1, the base to 0"]
    assert "batch_size is not listed" in handed_on_problems(_Drops)
    assert handed_on_problems(_Withholds) == [
        "stream is not listed",
        "its signature lists ['stream'] apart",
    ]


def test_a_fixed_argument_is_refused():
    with pytest.raises(TypeError, match="stream"):
        datamodules.BearingDataModule(stream="chunks/")
