# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Video-text alignment data: caption readers, feature stores, tokenisation, the dataset and its collate.

A video has its own number of segments, each segment its own number of frames, and each caption
its own number of tokens: two ragged axes on each side. Everything here keeps the data unpadded
(`Ragged` fields) until `VideoTextCollator` gathers a batch,
padded or packed, and builds the cross-modal alignment.

Public entry points (what a DataModule of one's own is built from): the caption readers
`read_youcook2`, `read_msrvtt`, `read_jsonl` and `read_msrvtt_protocol`
(-> `CaptionTable`); `open_features` (-> a `FeatureStore`);
`synthetic_corpus`; `tokenizer` and `caption_tokens` (cached tokens);
`VideoTextDataset`, `VideoTextCollator` and `budget_sizes` (the sampler
sizes that bound a padded batch). Helpers stay in their submodules:

- `.captions`: captions with timestamps (`CaptionTable`) from the YouCook2
  annotation JSON, MSR-VTT-style caption files or a generic JSONL;
- `.msrvtt`: MSR-VTT's retrieval protocols (9k / 7k train lists, the 1k-A test pairs);
- `.features`: precomputed features `[T, D]` per video (a folder of `.npy`, one
  `.npz` or one HDF5 file keyed by video id);
- `.source`: the caption table and feature store of a configured source;
- `.synthetic`: the embedded synthetic corpus, generated features, MSR-VTT-shaped files;
- `.tokenize`: unpadded caption tokens (in batches), a cache;
- `.storage`: the ragged fields a dataset serves and the batch selection it returns;
- `.dataset`: `VideoTextDataset`, one sample per video;
- `.served`: what a split serves as one Arrow table, written once per node, and the dataset
  that maps it (what the DataModule serves); `.replay`: what the build reported, stored
  beside the tables and replayed by every setup;
- `.alignment`: temporal overlap, IoU and alignment targets (both layouts);
- `.packed`: the packed batch (segments, frames, captions, tokens back to back);
- `.collate`: `VideoTextCollator`, both layouts' keys, and the sampler sizes that
  bound the padded tensors.

What models compute on these batches (attention over packed rows, retrieval metrics) lives with
the models: `varlen.models.attention`, `varlen.models.retrieval`.

Bad input raises `DataError` naming the file, video and row (a missing
file: `DatasetNotFoundError`); a bad caption or video goes through a
`DataReport`, which raises or counts it.
"""

from varlen._extras import require

require("video-text")  # first: names the extra when its packages are missing

from varlen.datasets.video_text.captions import CaptionTable, read_jsonl, read_msrvtt, read_youcook2
from varlen.datasets.video_text.collate import VideoTextCollator, budget_sizes
from varlen.datasets.video_text.dataset import VideoTextDataset
from varlen.datasets.video_text.features import FeatureStore, open_features
from varlen.datasets.video_text.msrvtt import read_msrvtt_protocol
from varlen.datasets.video_text.synthetic import synthetic_corpus
from varlen.datasets.video_text.tokenize import caption_tokens, tokenizer

__all__ = [
    "CaptionTable",
    "FeatureStore",
    "VideoTextCollator",
    "VideoTextDataset",
    "budget_sizes",
    "caption_tokens",
    "open_features",
    "read_jsonl",
    "read_msrvtt",
    "read_msrvtt_protocol",
    "read_youcook2",
    "synthetic_corpus",
    "tokenizer",
]
