"""Each DataModule's docstring lists its batch (a `Batch:` section); the first training batch has exactly
those keys, with those dtypes and dimensions, so the documentation cannot go stale.

The section's format, one key per line (a deeper-indented line continues the one above)::

    Batch:
        signals: [B, C, L] float32, what it holds
        num_nodes: int, a Python value rather than a tensor

A dimension that is a name (`B`) must have one size across the batch, a number that size.
"""

import inspect
import re
from pathlib import Path

import pytest
import torch

from varlen.datamodules import (
    BearingDataModule,
    HyperspectralDataModule,
    MoleculeDataModule,
    TextClassificationDataModule,
    VideoTextDataModule,
)

DATA = Path(__file__).parent / "data"
ENTRY = re.compile(r"(?P<name>\w+): (?:\[(?P<shape>[^\]]*)\] )?(?P<dtype>\w+), \S.*")

#: a tiny set-up of each documented DataModule (a class with a Batch section: add it here)
BUILD = {
    BearingDataModule: lambda tmp: BearingDataModule(
        simulated_per_class=1, simulated_seconds=(1.0, 2.0), window_length=512, stride=256, batch_size=4
    ),
    TextClassificationDataModule: lambda tmp: TextClassificationDataModule(
        synthetic_samples=60, max_length=32, batch_size=4, cache_dir=str(tmp)
    ),
    VideoTextDataModule: lambda tmp: VideoTextDataModule(synthetic_videos=20, batch_size=4),
    MoleculeDataModule: lambda tmp: MoleculeDataModule(path=str(DATA / "molecules" / "esol_tiny.csv"), batch_size=4),
    HyperspectralDataModule: lambda tmp: HyperspectralDataModule(
        scenes=["synthetic"], root=str(tmp), layout="generated", batch_size=4
    ),
}


def batch_section(cls: type) -> dict[str, tuple[list[str] | None, str]]:
    """`key -> (dimensions, or None for a Python value; dtype)` from the `Batch:` section of `cls`'s docstring."""
    lines = (inspect.getdoc(cls) or "").splitlines()
    assert "Batch:" in lines, f"{cls.__name__}'s docstring has no 'Batch:' section"
    entries, indent = {}, None
    for line in lines[lines.index("Batch:") + 1 :]:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth == 0 or (indent is not None and depth < indent):
            break
        indent = depth if indent is None else indent
        if depth > indent:
            continue  # the line above goes on
        match = ENTRY.fullmatch(line.strip())
        assert match, f"{cls.__name__}, Batch section: {line.strip()!r} is not 'name: [shape] dtype, description'"
        assert match["name"] not in entries, f"{cls.__name__}, Batch section: {match['name']!r} is listed twice"
        shape = match["shape"]
        entries[match["name"]] = ([d.strip() for d in shape.split(",")] if shape is not None else None, match["dtype"])
    assert entries, f"{cls.__name__}'s Batch section lists no key"
    return entries


def check_batch(cls: type, batch) -> None:
    """`batch` (a dict of tensors or a PyG `Batch`) against `cls`'s Batch section."""
    documented = batch_section(cls)
    keys = set(batch.keys())
    assert keys == set(documented), (
        f"{cls.__name__}: undocumented keys {sorted(keys - set(documented))}, documented and absent "
        f"{sorted(set(documented) - keys)}"
    )
    sizes: dict[str, int] = {}
    for key, (dims, dtype) in documented.items():
        value = batch[key]
        if dims is None:
            assert type(value).__name__ == dtype, f"{cls.__name__}: {key} is a {type(value).__name__}, not {dtype}"
            continue
        assert torch.is_tensor(value), f"{cls.__name__}: {key} is a {type(value).__name__}, not a tensor"
        assert str(value.dtype).removeprefix("torch.") == dtype, f"{cls.__name__}: {key} is {value.dtype}, not {dtype}"
        assert value.ndim == len(dims), f"{cls.__name__}: {key} has shape {tuple(value.shape)}, documented {dims}"
        for dim, size in zip(dims, value.shape, strict=True):
            if dim.isdigit():
                assert size == int(dim), f"{cls.__name__}: {key} has shape {tuple(value.shape)}, documented {dims}"
            elif dim.isidentifier():
                assert sizes.setdefault(dim, size) == size, (
                    f"{cls.__name__}: {dim} of {key} is {size}, not {sizes[dim]}"
                )


@pytest.mark.parametrize("cls", list(BUILD), ids=lambda cls: cls.__name__)
def test_the_first_training_batch_is_the_documented_one(cls: type, tmp_path: Path) -> None:
    dm = BUILD[cls](tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    check_batch(cls, next(iter(dm.train_dataloader())))


def test_the_section_is_read_line_by_line() -> None:
    """Continuation lines belong to the entry above, the section ends at a blank line; a malformed entry is named."""

    class Documented:
        """A DataModule.

        Batch:
            values: [B, 2] float32, a long description
                that goes on
            count: int, a number

        Args:
            other: not a key
        """

    class Malformed:
        """A DataModule.

        Batch:
            values [B] float32 (no colon)
        """

    assert batch_section(Documented) == {"values": (["B", "2"], "float32"), "count": (None, "int")}
    check_batch(Documented, {"values": torch.zeros(3, 2), "count": 3})
    with pytest.raises(AssertionError, match="values: \\[B, 2\\]|not float32"):
        check_batch(Documented, {"values": torch.zeros(3, 2, dtype=torch.int64), "count": 3})
    with pytest.raises(AssertionError, match=r"'values \[B\] float32 \(no colon\)' is not"):
        batch_section(Malformed)
