# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Video-text alignment data: caption readers, feature stores, tokenisation, the dataset and its collate.

A video has its own number of segments, each segment its own number of frames, and each caption
its own number of tokens: two ragged axes on each side. Everything here keeps the data unpadded
(:class:`~varlen.batching.ragged.Ragged` fields) until :class:`VideoTextCollator` gathers a batch,
padded or packed, and builds the cross-modal alignment.

Public entry points (what a DataModule of one's own is built from): the caption readers
:func:`read_youcook2`, :func:`read_msrvtt`, :func:`read_jsonl` and :func:`read_msrvtt_protocol`
(-> :class:`CaptionTable`); :func:`open_features` (-> a :class:`FeatureStore`);
:func:`synthetic_corpus`; :func:`tokenizer` and :func:`caption_tokens` (cached tokens);
:class:`VideoTextDataset`, :class:`VideoTextCollator` and :func:`budget_sizes` (the sampler
sizes that bound a padded batch). Helpers stay in their submodules:

- :mod:`.captions`: captions with timestamps (:class:`CaptionTable`) from the YouCook2
  annotation JSON, MSR-VTT-style caption files or a generic JSONL;
- :mod:`.msrvtt`: MSR-VTT's retrieval protocols (9k / 7k train lists, the 1k-A test pairs);
- :mod:`.features`: precomputed features ``[T, D]`` per video (a folder of ``.npy``, one
  ``.npz`` or one HDF5 file keyed by video id);
- :mod:`.source`: the caption table and feature store of a configured source;
- :mod:`.synthetic`: the embedded synthetic corpus, generated features, MSR-VTT-shaped files;
- :mod:`.tokenize`: unpadded caption tokens (in batches), a cache;
- :mod:`.storage`: the ragged fields a dataset serves and the batch selection it returns;
- :mod:`.dataset`: :class:`VideoTextDataset`, one sample per video;
- :mod:`.served`: what a split serves as one Arrow table, written once per node, and the dataset
  that maps it (what the DataModule serves); :mod:`.replay`: what the build reported, stored
  beside the tables and replayed by every setup;
- :mod:`.alignment`: temporal overlap, IoU and alignment targets (both layouts);
- :mod:`.packed`: the packed batch (segments, frames, captions, tokens back to back);
- :mod:`.collate`: :class:`VideoTextCollator`, both layouts' keys, and the sampler sizes that
  bound the padded tensors.

What models compute on these batches (attention over packed rows, retrieval metrics) lives with
the models: :mod:`varlen.models.attention`, :mod:`varlen.models.retrieval`.

Bad input raises :class:`~varlen.errors.DataError` naming the file, video and row (a missing
file: :class:`~varlen.errors.DatasetNotFoundError`); a bad caption or video goes through a
:class:`~varlen.prepare.report.DataReport`, which raises or counts it.
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
