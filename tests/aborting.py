"""A dataset that aborts the process while the interpreter finalises, in a module a spawned worker
imports quickly (nothing but torch)."""

import atexit
import os

import torch


class AbortsAtExit(torch.utils.data.Dataset):
    """Stands for an extension library that aborts the process while the interpreter finalises."""

    def __init__(self) -> None:
        self.size = 8

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> int:
        return i

    def __setstate__(self, state: dict) -> None:  # runs in the spawned worker
        self.__dict__.update(state)
        atexit.register(os.abort)
