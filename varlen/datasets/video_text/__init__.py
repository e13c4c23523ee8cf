"""Video-text alignment data: caption readers, feature stores, tokenisation, the dataset and its collate.

A video has its own number of segments, each segment its own number of frames, and each caption
its own number of tokens: two ragged axes on each side. Everything here keeps the data unpadded
until :class:`VideoTextCollator` pads a batch and builds the cross-modal masks.

- :mod:`.captions`: captions with timestamps (:class:`CaptionTable`) from the YouCook2
  annotation JSON, MSR-VTT-style caption files or a generic JSONL;
- :mod:`.features`: precomputed features ``[T, D]`` per video (a folder of ``.npy``, one
  ``.npz`` or one HDF5 file keyed by video id);
- :mod:`.synthetic`: the embedded synthetic corpus and generated features;
- :mod:`.tokenize`: unpadded caption tokens and their cache;
- :mod:`.dataset`: :class:`VideoTextDataset`, one sample per video;
- :mod:`.collate`: :class:`VideoTextCollator` and the sampler sizes that bound its tensors.

Bad input raises :class:`~varlen.errors.DataError` naming the file, video and row (a missing
file: :class:`~varlen.errors.DatasetNotFoundError`); a bad caption or video goes through a
:class:`~varlen.report.DataReport`, which raises or counts it.
"""

from varlen.datasets.video_text.captions import (
    READERS,
    YOUCOOK2_URL,
    CaptionTable,
    read_jsonl,
    read_msrvtt,
    read_youcook2,
)
from varlen.datasets.video_text.collate import (
    IGNORE_INDEX,
    SEGMENT_EDGES,
    VideoTextCollator,
    alignment_targets,
    budget_sizes,
    cross_attention_masks,
    pad_segments,
    segment_class,
    temporal_alignment,
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
from varlen.datasets.video_text.source import SOURCES, open_source
from varlen.datasets.video_text.synthetic import SentenceFeatures, SyntheticFeatures, synthetic_corpus
from varlen.datasets.video_text.tokenize import Tokenized, caption_tokens, tokenize_captions, tokenizer

__all__ = [
    "IGNORE_INDEX",
    "READERS",
    "SEGMENT_EDGES",
    "SOURCES",
    "YOUCOOK2_URL",
    "CaptionTable",
    "FeatureStore",
    "HDF5Features",
    "NpyFolderFeatures",
    "NpzFeatures",
    "Segmentation",
    "SentenceFeatures",
    "SyntheticFeatures",
    "Tokenized",
    "VideoTextCollator",
    "VideoTextDataset",
    "alignment_targets",
    "budget_sizes",
    "caption_tokens",
    "cross_attention_masks",
    "frame_ranges",
    "open_features",
    "open_source",
    "pad_segments",
    "read_jsonl",
    "read_msrvtt",
    "read_youcook2",
    "segment_class",
    "synthetic_corpus",
    "temporal_alignment",
    "tokenize_captions",
    "tokenizer",
]
