"""`TextReport`: the shared `DataReport`, plus how many windows long texts became.

With `overflow="windows"` nothing is truncated (the report counts no truncation), but a split
holds more samples than its file has rows: the report says how many documents became how many
windows, so that `kept` (windows) is not mistaken for a row count.
"""

from __future__ import annotations

from typing import Any

from varlen.prepare.report import DataReport, OnBad

__all__ = ["TextReport"]


class TextReport(DataReport):
    """A `DataReport` that also records `documents -> windows` per split.

    Attributes:
        windows: `split -> (documents, windows)` for the splits whose texts were cut into windows.
    """

    def __init__(self, on_bad: OnBad = "raise", max_examples: int = 3) -> None:
        super().__init__(on_bad, max_examples)
        self.windows: dict[str, tuple[int, int]] = {}

    def window(self, split: str, documents: int, windows: int) -> None:
        """`documents` texts of `split` became `windows` samples."""
        self.windows[split] = (int(documents), int(windows))

    def clear(self) -> None:
        super().clear()
        self.windows.clear()

    def to_dict(self) -> dict[str, Any]:
        """The shared fields, plus `documents` and `windows` for the windowed splits."""
        out = super().to_dict()
        for split, (documents, windows) in self.windows.items():
            out.setdefault(split, {}).update(documents=documents, windows=windows)
        return out

    def __str__(self) -> str:
        lines = [super().__str__()]
        for split, (documents, windows) in self.windows.items():
            lines.append(
                f"windows in {split}: {documents:,} documents became {windows:,} windows "
                f"({windows / max(documents, 1):.2f} per document; nothing truncated)"
            )
        return "\n".join(lines)
