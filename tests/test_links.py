"""Every data -> model link of the CLI connects: jsonargparse skips a link whose source or target is
missing, and the model then keeps its default (a wrong class count, vocabulary or feature size)."""

import inspect

import pytest

import varlen.datamodules
import varlen.models
from varlen.cli.dispatch import LINKED

#: scenario module -> (DataModule, model), as the configs pair them
PAIRS = {
    module: (name, next(m for m, mod in varlen.models.SCENARIOS.items() if mod == module))
    for name, module in varlen.datamodules.SCENARIOS.items()
}


def test_every_scenario_has_a_model() -> None:
    assert set(PAIRS) == set(varlen.models.SCENARIOS.values())


@pytest.mark.parametrize("module", sorted(PAIRS))
def test_linked_names_exist_on_both_sides(module: str) -> None:
    """A model argument named in LINKED has its DataModule attribute (known after `__init__`, with
    default arguments), and a linked attribute of the DataModule has its model argument."""
    data_name, model_name = PAIRS[module]
    dm = getattr(varlen.datamodules, data_name)()
    model_args = set(inspect.signature(getattr(varlen.models, model_name)).parameters)
    for name in LINKED:
        on_model = name in model_args
        on_data = hasattr(dm, name)
        assert on_model == on_data, (
            f"{data_name}.{name} exists: {on_data}; {model_name}({name}=...) exists: {on_model}: "
            "the link would be skipped"
        )
    assert model_args & set(LINKED), f"{model_name} takes no linked value at all"
