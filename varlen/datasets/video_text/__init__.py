# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Video-text alignment data: caption readers, feature stores, tokenisation, the dataset and its collate.

A video has its own number of segments, each segment its own number of frames, and each caption
its own number of tokens: two ragged axes on each side. Everything here keeps the data unpadded
(:class:`~varlen.batching.ragged.Ragged` fields) until :class:`VideoTextCollator` gathers a batch,
padded or packed, and builds the cross-modal alignment.

- :mod:`.captions`: captions with timestamps (:class:`CaptionTable`) from the YouCook2
  annotation JSON, MSR-VTT-style caption files or a generic JSONL;
- :mod:`.msrvtt`: MSR-VTT's retrieval protocols (9k / 7k train lists, the 1k-A test pairs);
- :mod:`.features`: precomputed features ``[T, D]`` per video (a folder of ``.npy``, one
  ``.npz`` or one HDF5 file keyed by video id);
- :mod:`.synthetic`: the embedded synthetic corpus, generated features, MSR-VTT-shaped files;
- :mod:`.tokenize`: unpadded caption tokens and their cache;
- :mod:`.storage`: the ragged fields a dataset serves and the batch selection it returns;
- :mod:`.dataset`: :class:`VideoTextDataset`, one sample per video;
- :mod:`.alignment`: temporal overlap, IoU and alignment targets (both layouts);
- :mod:`.packed`: the packed batch (segments, frames, captions, tokens back to back);
- :mod:`.collate`: :class:`VideoTextCollator`, both layouts' keys, and the sampler sizes that
  bound the padded tensors.

What models compute on these batches (attention over packed rows, retrieval metrics) lives with
the models: :mod:`varlen.models.attention`, :mod:`varlen.models.retrieval`.

Bad input raises :class:`~varlen.errors.DataError` naming the file, video and row (a missing
file: :class:`~varlen.errors.DatasetNotFoundError`); a bad caption or video goes through a
:class:`~varlen.report.DataReport`, which raises or counts it.
"""

from varlen._extras import require

require("video-text")  # first: names the extra when its packages are missing

from varlen.datasets.video_text.alignment import IGNORE_INDEX, alignment_targets, span_overlap, temporal_alignment
from varlen.datasets.video_text.captions import (
    MSRVTT_DATA_URL,
    READERS,
    YOUCOOK2_URL,
    CaptionTable,
    read_jsonl,
    read_msrvtt,
    read_youcook2,
)
from varlen.datasets.video_text.collate import (
    SEGMENT_EDGES,
    VideoTextCollator,
    budget_sizes,
    cross_attention_masks,
    pad_segments,
    segment_class,
)
from varlen.datasets.video_text.dataset import Segmentation, VideoTextDataset
from varlen.datasets.video_text.features import (
    FeatureStore,
    HDF5Features,
    NpyFolderFeatures,
    NpzFeatures,
    frame_ranges,
    open_features,
)
from varlen.datasets.video_text.msrvtt import read_msrvtt_protocol, read_test_pairs, read_video_list
from varlen.datasets.video_text.packed import LAYOUTS, Layout, pack_batch, same_video_pairs
from varlen.datasets.video_text.source import SOURCES, open_source
from varlen.datasets.video_text.storage import VideoTextFields, VideoTextSelection
from varlen.datasets.video_text.synthetic import (
    SentenceFeatures,
    SyntheticFeatures,
    synthetic_corpus,
    write_msrvtt_files,
)
from varlen.datasets.video_text.tokenize import Tokenized, caption_tokens, tokenize_captions, tokenizer

__all__ = [
    "IGNORE_INDEX",
    "LAYOUTS",
    "MSRVTT_DATA_URL",
    "READERS",
    "SEGMENT_EDGES",
    "SOURCES",
    "YOUCOOK2_URL",
    "CaptionTable",
    "FeatureStore",
    "HDF5Features",
    "Layout",
    "NpyFolderFeatures",
    "NpzFeatures",
    "Segmentation",
    "SentenceFeatures",
    "SyntheticFeatures",
    "Tokenized",
    "VideoTextCollator",
    "VideoTextDataset",
    "VideoTextFields",
    "VideoTextSelection",
    "alignment_targets",
    "budget_sizes",
    "caption_tokens",
    "cross_attention_masks",
    "frame_ranges",
    "open_features",
    "open_source",
    "pack_batch",
    "pad_segments",
    "read_jsonl",
    "read_msrvtt",
    "read_msrvtt_protocol",
    "read_test_pairs",
    "read_video_list",
    "read_youcook2",
    "same_video_pairs",
    "segment_class",
    "span_overlap",
    "synthetic_corpus",
    "temporal_alignment",
    "tokenize_captions",
    "tokenizer",
    "write_msrvtt_files",
]
