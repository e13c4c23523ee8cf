"""Writes the tiny text tables used by tests/test_text.py (deterministic; run from anywhere).

The same 24 short reviews in every format the readers take: CSV (a quoted field holding a
comma and a newline), TSV in the GLUE layout (no quoting), JSON Lines, a JSON array, Parquet;
and broken variants, each with one defect: undecodable bytes, an empty file, a header without
rows, a row with too many fields, a corrupt Parquet file, an empty text, a non-finite label, a
single class, a validation table with a label training never saw; and the split marked in a
column: fastai's `is_valid` (True / False) and a `split` column of names in any case.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

HERE = Path(__file__).parent
WORDS = "gripping dull charming tedious witty bland moving clumsy vivid flat tender stale".split()
ROWS = [{"text": f"review {i}: a {WORDS[i % len(WORDS)]} film", "label": ["neg", "pos"][i % 2]} for i in range(24)]
ROWS[5]["text"] = 'a "quoted", two-line\nreview'  # CSV quoting; TSV and JSON keep it as it is


def write_csv(path: Path, rows: list[dict], fields: tuple[str, ...] = ("text", "label")) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_formats() -> None:
    write_csv(HERE / "reviews.csv", ROWS)
    tsv = ["sentence\tlabel"] + [f"{r['text'].replace(chr(10), ' ')}\t{r['label']}" for r in ROWS]
    (HERE / "reviews.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    (HERE / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (HERE / "reviews.json").write_text(json.dumps(ROWS, indent=1), encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), HERE / "reviews.parquet")


def write_broken() -> None:
    (HERE / "latin1.csv").write_bytes("text,label\nfine,pos\nun café noir,neg\n".encode("latin-1"))
    (HERE / "empty.csv").write_bytes(b"")
    (HERE / "header_only.csv").write_text("text,label\n", encoding="utf-8")
    (HERE / "ragged.csv").write_text("text,label\nfine,pos\nnot, quoted,neg\n", encoding="utf-8")
    (HERE / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    empty_text = [dict(r) for r in ROWS]
    empty_text[3]["text"] = "  "
    write_csv(HERE / "empty_text.csv", empty_text)
    numeric = [{"text": r["text"], "label": i % 2} for i, r in enumerate(ROWS)]
    numeric[7]["label"] = "inf"
    write_csv(HERE / "inf_label.csv", numeric)
    write_csv(HERE / "one_class.csv", [{"text": r["text"], "label": "pos"} for r in ROWS])
    unknown = [dict(r) for r in ROWS[:6]]
    unknown[2]["label"] = "neutral"
    write_csv(HERE / "val_unknown_label.csv", unknown)


def write_split_columns() -> None:
    marked = [{**r, "is_valid": i % 3 == 0} for i, r in enumerate(ROWS)]  # rows 0, 3, ... 21: validation
    write_csv(HERE / "is_valid.csv", marked, ("text", "label", "is_valid"))
    names = ["train", "Train", "TRAIN", "validation", "train", "test", "train", "dev"]
    named = [{**r, "split": names[i % len(names)]} for i, r in enumerate(ROWS)]
    (HERE / "split_names.jsonl").write_text("".join(json.dumps(r) + "\n" for r in named), encoding="utf-8")


if __name__ == "__main__":
    write_formats()
    write_broken()
    write_split_columns()
