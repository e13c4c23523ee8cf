"""`given_back`: everything a warm-up's training steps touch, kept on entry and put back on exit.

Why by name, not by tensor: a forward may reassign a buffer (`self.ema = 0.9 * self.ema + 0.1 * x`:
`nn.Module.__setattr__` puts a new tensor under the name), so copying values back into the tensors seen on
entry would leave the new one registered. Each module's parameters, buffers, submodules and plain attributes
are put back under their names, each the object it was on entry (the one an optimizer holds) holding its
entry values. The same for each optimizer (its hyperparameters, a learning rate decayed in place, and its
state: Adam's moments on a resumed fit), each LR scheduler, the AMP scaler and every random generator.

Values are kept on the host, so the device holds nothing more during the warm-up than training does.
A torchmetrics state updated in place (`self.tp += tp`) is kept as a deep copy.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

__all__ = ["given_back"]


@contextlib.contextmanager
def given_back(
    module: torch.nn.Module, optimizers: Iterable[Any] = (), schedulers: Iterable[Any] = (), scaler: Any = None
) -> Iterator[None]:
    """Inside, anything may change `module`, `optimizers`, `schedulers` (their `state_dict`), the AMP
    `scaler` and the Python, numpy, torch, CUDA and MPS generators; on exit each is as it was on entry."""
    modules = [(m, _ModuleState(m)) for m in module.modules()]
    optimizers = [(o, _OptimizerState(o)) for o in optimizers]
    schedulers = [(s, copy.deepcopy(s.state_dict())) for s in schedulers]
    scaling = copy.deepcopy(scaler.state_dict()) if scaler is not None and scaler.is_enabled() else None
    generators = _random_states()
    try:
        yield
    finally:
        for m, state in modules:
            state.give_back(m)
        for o, state in optimizers:
            state.give_back(o)
        for s, state in schedulers:
            s.load_state_dict(copy.deepcopy(state))
        if scaling is not None:
            scaler.load_state_dict(scaling)
        _set_random_states(generators)


class _Value:
    """A tensor and its values on entry (on the host), put back into that same tensor object."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.device = tensor.device
        self.value = tensor.detach().to("cpu", copy=True)

    def give_back(self) -> torch.Tensor:
        t = self.tensor
        with torch.no_grad():
            if (t.shape, t.dtype, t.device) == (self.value.shape, self.value.dtype, self.device):
                t.copy_(self.value)
            else:  # its data was replaced inside
                t.data = self.value.to(self.device)
        return self.tensor


def _kept(value: Any) -> Any:
    return _Value(value) if torch.is_tensor(value) else copy.deepcopy(value)


def _put_back(kept: Any) -> Any:
    return kept.give_back() if isinstance(kept, _Value) else copy.deepcopy(kept)


REGISTRIES = ("_parameters", "_buffers", "_non_persistent_buffers_set", "_modules")


class _ModuleState:
    """A module's own attributes, parameters (with gradients), buffers (and which are not saved) and
    submodules, by name; a torchmetrics `Metric`'s states and update bookkeeping."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.attributes = dict(module.__dict__)
        self.registered = {name: copy.copy(self.attributes[name]) for name in REGISTRIES if name in self.attributes}
        self.values = [
            _Value(t)
            for t in [*self.registered["_parameters"].values(), *self.registered["_buffers"].values()]
            if t is not None
        ]
        self.grads = [
            (p, None if p.grad is None else _Value(p.grad))
            for p in self.registered["_parameters"].values()
            if p is not None
        ]
        states = (
            [*getattr(module, "_defaults", {}), "_update_count", "_computed"] if hasattr(module, "_defaults") else []
        )
        self.metric = {name: copy.deepcopy(getattr(module, name)) for name in states if hasattr(module, name)}

    def give_back(self, module: torch.nn.Module) -> None:
        for name in set(module.__dict__) - set(self.attributes):  # set inside (a silenced log, a new attribute)
            del module.__dict__[name]
        module.__dict__.update(self.attributes)
        for name, entries in self.registered.items():
            registry = module.__dict__[name]
            registry.clear()
            registry.update(entries)
        for value in self.values:
            value.give_back()
        for parameter, grad in self.grads:
            parameter.grad = None if grad is None else grad.give_back()
        for name, value in self.metric.items():
            setattr(module, name, copy.deepcopy(value))


class _OptimizerState:
    """An optimizer's parameter groups (their hyperparameters) and per-parameter state, each object kept."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.groups = [
            (group, {k: v if k == "params" else _kept(v) for k, v in group.items()}) for group in optimizer.param_groups
        ]
        self.state = [(p, entries, {k: _kept(v) for k, v in entries.items()}) for p, entries in optimizer.state.items()]

    def give_back(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.param_groups[:] = [group for group, _ in self.groups]
        for group, entries in self.groups:
            group.clear()
            group.update({k: v if k == "params" else _put_back(v) for k, v in entries.items()})
        optimizer.state.clear()
        for p, entries, kept in self.state:
            entries.clear()
            entries.update({k: _put_back(v) for k, v in kept.items()})
            optimizer.state[p] = entries


def _random_states() -> dict[str, Any]:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():
        states["mps"] = torch.mps.get_rng_state()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])
    if "mps" in states:
        torch.mps.set_rng_state(states["mps"])
