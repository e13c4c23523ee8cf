"""Video-text alignment: contract, collate layout, mask semantics, readers, bad input, DDP."""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from varlen.datamodules.video_text import (
    DEFAULT_BUDGET,
    IGNORE_INDEX,
    VideoTextDataModule,
    cross_attention_masks,
    pad_segments,
    temporal_alignment,
)
from varlen.datasets.video_text import (
    CaptionTable,
    NpzFeatures,
    VideoTextDataError,
    VideoTextDataset,
    load_tokenizer,
    open_features,
    read_jsonl,
    read_msrvtt,
    read_youcook2,
    tokenize_captions,
)
from varlen.models.video_text import RetrievalRanks, VideoTextAligner
from varlen.testing import DataModuleContract, ddp_fit

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "video_text"
CONFIG = str(ROOT / "configs" / "video_text.yaml")
SMALL = {"synthetic_videos": 60}
# the CLI tests and the DDP fit run on the same small corpus as the Python-built DataModules
SMALL_CLI = [
    f"--data.init_args.synthetic_videos={SMALL['synthetic_videos']}",
    "--model.init_args.hidden=16",
    "--model.init_args.heads=2",
]
YOUCOOK2 = "youcookii_annotations_trainval.json"


def small_model(dm: VideoTextDataModule, **kwargs) -> VideoTextAligner:
    return VideoTextAligner(
        feature_dim=dm.feature_dim, vocab_size=dm.vocab_size, pad_token_id=dm.pad_token_id, hidden=32, **kwargs
    )


class TestVideoTextContract(DataModuleContract):
    config = CONFIG
    cli_overrides = SMALL_CLI

    def make_datamodule(self, **overrides):
        return VideoTextDataModule(**{**SMALL, "max_tokens": (48, 1024), **overrides})

    def make_model(self, datamodule):
        return small_model(datamodule)

    def budget_overrides(self):
        return {"max_tokens": (24, 300)}  # (video segments, caption tokens)


# -- collate ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dm() -> VideoTextDataModule:
    datamodule = VideoTextDataModule(**SMALL)
    datamodule.setup()
    return datamodule


@pytest.fixture(scope="module")
def fixed_dm() -> VideoTextDataModule:
    """Fixed 8 s video segments against the captions' own spans: a non-diagonal alignment."""
    datamodule = VideoTextDataModule(**SMALL, segmentation="fixed", segment_duration=8.0, frames=True)
    datamodule.setup()
    return datamodule


def test_collate_puts_every_token_and_segment_where_it_belongs(dm) -> None:
    ds = dm.dataset("val")
    samples = [ds[i] for i in range(5)]
    batch = dm.collate_fn(samples)
    assert batch["index"].tolist() == [0, 1, 2, 3, 4]
    for b, s in enumerate(samples):
        n_seg, n_cap = len(s["video"]), len(s["token_counts"])
        assert batch["video_mask"][b].sum() == n_seg and batch["text_segment_mask"][b].sum() == n_cap
        torch.testing.assert_close(batch["video"][b, :n_seg], torch.from_numpy(s["video"]))
        assert (batch["video"][b, n_seg:] == 0).all()
        assert batch["text_ids"][b][batch["text_mask"][b]].tolist() == s["text_ids"].tolist()
        assert batch["text_mask"][b].sum(-1)[:n_cap].tolist() == s["token_counts"].tolist()
        assert (batch["text_ids"][b][~batch["text_mask"][b]] == dm.pad_token_id).all()
    # the sampler's sizes are what the batch holds on each axis
    lengths = ds.lengths[[0, 1, 2, 3, 4]]
    assert batch["video_mask"].sum(1).tolist() == lengths[:, 0].tolist()
    assert batch["text_mask"].sum((1, 2)).tolist() == lengths[:, 1].tolist()


def test_annotated_segments_align_on_the_diagonal(dm) -> None:
    batch = dm.collate_fn([dm.dataset("val")[i] for i in range(6)])
    real = batch["video_mask"]
    eye = torch.eye(real.shape[1], dtype=torch.bool)
    expected = eye[None] & real[:, :, None] & real[:, None, :]
    assert torch.equal(batch["alignment_mask"], expected)  # synthetic steps never overlap
    target = torch.where(real, torch.arange(real.shape[1]), torch.full_like(real, IGNORE_INDEX, dtype=torch.long))
    assert torch.equal(batch["alignment_target"], target)


def test_fixed_segments_align_by_overlap_and_keep_frames(fixed_dm) -> None:
    ds = fixed_dm.dataset("val")
    samples = [ds[i] for i in range(4)]
    batch = fixed_dm.collate_fn(samples)
    assert batch["video"].dim() == 4 and batch["frame_mask"].shape == batch["video"].shape[:3]
    for b, s in enumerate(samples):
        torch.testing.assert_close(batch["video"][b][batch["frame_mask"][b]], torch.from_numpy(s["frames"]))
        vt, tt = s["video_times"], s["text_times"]
        for i in range(len(vt)):  # the plain-loop definition the broadcast must match
            for j in range(len(tt)):
                overlap = min(vt[i, 1], tt[j, 1]) - max(vt[i, 0], tt[j, 0])
                assert bool(batch["alignment_mask"][b, i, j]) == (overlap > 0)
    assert not batch["alignment_mask"][~batch["video_mask"]].any()
    assert not batch["alignment_mask"].transpose(1, 2)[~batch["text_segment_mask"]].any()
    # a fixed 8 s cut overlaps several captions and a caption several cuts: not a diagonal
    assert (batch["alignment_mask"].sum(-1) > 1).any() or (batch["alignment_mask"].sum(1) > 1).any()
    assert fixed_dm.dataset("train").lengths[:, 0].sum() > 0  # frames are the video size axis


def test_iou_threshold_and_ties() -> None:
    video = torch.tensor([[[0.0, 10.0], [10.0, 20.0], [0.0, 20.0]]])
    text = torch.tensor([[[0.0, 10.0], [5.0, 20.0]]])
    keep, iou = temporal_alignment(video, text, torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool))
    torch.testing.assert_close(iou[0], torch.tensor([[1.0, 5 / 20], [0.0, 10 / 15], [0.5, 0.75]]))
    assert keep[0].tolist() == [[True, True], [False, True], [True, True]]
    strict, _ = temporal_alignment(
        video, text, torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool), min_iou=0.6
    )
    assert strict[0].tolist() == [[True, False], [False, True], [False, True]]
    from varlen.datamodules.video_text import alignment_targets

    assert alignment_targets(keep, iou)[0].tolist() == [0, 1, 1]
    tie, tie_iou = temporal_alignment(
        torch.tensor([[[0.0, 10.0]]]), torch.tensor([[[0.0, 10.0], [0.0, 10.0]]]),
        torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool),
    )  # fmt: skip
    assert alignment_targets(tie, tie_iou).tolist() == [[IGNORE_INDEX]]


def test_pad_segments_rejects_inconsistent_counts() -> None:
    with pytest.raises(ValueError, match="counts add up"):
        pad_segments([np.arange(5)], [np.array([2, 2])])


# -- mask semantics against PyTorch's attention APIs ------------------------------------------


def _attention_inputs(fixed_dm):
    batch = fixed_dm.collate_fn([fixed_dm.dataset("val")[i] for i in range(4)])
    keep = batch["alignment_mask"].transpose(1, 2)  # captions (queries) x video segments (keys)
    # a padded caption slot may see the real segments, so that no query row is all-blocked
    keep = keep | (~keep.any(-1, keepdim=True) & batch["video_mask"][:, None, :])
    torch.manual_seed(0)
    b, q, k = keep.shape
    return batch, keep, torch.randn(b, q, 16), torch.randn(b, k, 16), torch.randn(b, k, 16)


def _reference(query, key, value, keep, scale):
    """Softmax restricted to the allowed keys of each query, by explicit loops over rows."""
    out = torch.zeros_like(query)
    for b in range(query.shape[0]):
        for i in range(query.shape[1]):
            allowed = keep[b, i].nonzero().flatten()
            weights = torch.softmax(query[b, i] @ key[b, allowed].T * scale, dim=-1)
            out[b, i] = weights @ value[b, allowed]
    return out


def test_multihead_attention_never_attends_blocked_positions(fixed_dm) -> None:
    batch, keep, query, key, value = _attention_inputs(fixed_dm)
    heads = 2
    mha = nn.MultiheadAttention(16, heads, batch_first=True).eval()
    masks = cross_attention_masks(keep, heads)
    assert masks["mha_bool"].dtype == torch.bool and torch.equal(masks["mha_bool"][::heads], ~keep)
    with torch.no_grad():
        out, weights = mha(query, key, value, attn_mask=masks["mha_bool"], average_attn_weights=False)
        out_add, _ = mha(query, key, value, attn_mask=masks["additive"])
        assert (weights.masked_select(~keep[:, None]) == 0).all()  # blocked = zero weight, every head
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
        torch.testing.assert_close(out, out_add)
        # changing keys and values where a query is blocked does not change that query's output
        noisy_key, noisy_value = key.clone(), value.clone()
        padded = ~batch["video_mask"]
        noisy_key[padded], noisy_value[padded] = 1e3, -1e3
        out_noisy, _ = mha(query, noisy_key, noisy_value, attn_mask=masks["mha_bool"])
        torch.testing.assert_close(out_noisy, out)
        # the keep-mask passed where MHA expects "blocked" is wrong, and visibly so
        out_wrong, _ = mha(query, noisy_key, noisy_value, attn_mask=keep.repeat_interleave(heads, 0))
        assert not torch.allclose(out_wrong, out)


def test_scaled_dot_product_attention_conventions(fixed_dm) -> None:
    _, keep, query, key, value = _attention_inputs(fixed_dm)
    masks = cross_attention_masks(keep, num_heads=1)
    expected = _reference(query, key, value, keep, scale=16**-0.5)
    q, k, v = query[:, None], key[:, None], value[:, None]  # one head
    out_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=masks["sdpa_bool"])[:, 0]  # True = allowed
    out_add = F.scaled_dot_product_attention(q, k, v, attn_mask=masks["additive"][:, None])[:, 0]
    torch.testing.assert_close(out_bool, expected)
    torch.testing.assert_close(out_add, expected)
    # MHA's convention (True = blocked) handed to SDPA attends exactly the wrong positions
    flipped = masks["mha_bool"][:, None] | ~keep.any(-1, keepdim=True)[:, None]
    out_flipped = F.scaled_dot_product_attention(q, k, v, attn_mask=flipped)[:, 0]
    assert not torch.allclose(out_flipped, expected)


# -- model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["annotated", "fixed"])
def test_alignment_logits_and_spans_ignore_padding(which, dm, fixed_dm) -> None:
    datamodule = dm if which == "annotated" else fixed_dm
    torch.manual_seed(0)
    model = small_model(datamodule).eval()
    ds = datamodule.dataset("val")
    sizes = ds.lengths[:, 0]
    samples = [ds[int(np.argmin(sizes))], ds[int(np.argmax(sizes))], ds[0]]
    batch = datamodule.collate_fn(samples)
    with torch.no_grad():
        together = model.encode(batch)
        for b, sample in enumerate(samples):
            alone = model.encode(datamodule.collate_fn([sample]))
            n_v, n_t = len(sample["video_times"]), len(sample["text_times"])
            torch.testing.assert_close(
                together["align_logits"][b, :n_v, :n_t], alone["align_logits"][0], atol=1e-5, rtol=1e-4
            )
            torch.testing.assert_close(together["spans"][b, :n_t], alone["spans"][0], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(together["video_emb"][b], alone["video_emb"][0], atol=1e-5, rtol=1e-4)
        assert torch.isfinite(together["spans"]).all()


def test_training_steps_reduce_the_loss(dm) -> None:
    torch.manual_seed(0)
    model = small_model(dm, lr=3e-3)
    batch = dm.collate_fn([dm.dataset("train")[i] for i in range(16)])
    optimizer = model.configure_optimizers()
    first = None
    for _ in range(15):
        loss = model.losses(batch, model.encode(batch))["loss"]
        first = float(loss.detach()) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < 0.7 * first


# -- readers and feature stores ---------------------------------------------------------------


def _tiny(annotations: Path, source: str, features: Path | str, **kwargs) -> VideoTextDataModule:
    datamodule = VideoTextDataModule(
        source=source, annotations=str(annotations), features=str(features), batch_size=4, **kwargs
    )
    datamodule.setup()
    return datamodule


@pytest.mark.parametrize("features", ["features", "features.npz", "features.h5"])
def test_youcook2_with_every_feature_format(features) -> None:
    datamodule = _tiny(DATA / "youcook2.json", "youcook2", DATA / features)
    assert datamodule.feature_dim == 8
    database = json.loads((DATA / "youcook2.json").read_text())["database"]
    test = datamodule.dataset("test")  # the official "validation" subset
    assert test.video_ids == [v for v, e in database.items() if e["subset"] == "validation"]
    sample = test[0]
    entry = database[test.video_ids[0]]
    assert sample["text_times"].tolist() == [a["segment"] for a in entry["annotations"]]
    frames = np.load(DATA / "features" / f"{test.video_ids[0]}.npy")
    start, end = entry["annotations"][0]["segment"]
    np.testing.assert_allclose(sample["video"][0], frames[start:end].mean(0), rtol=1e-5, atol=1e-6)
    train_ids = set(datamodule.dataset("train").video_ids) | set(datamodule.dataset("val").video_ids)
    assert not train_ids & set(test.video_ids)
    assert len(train_ids) == 6


def test_msrvtt_captions_span_the_whole_video() -> None:
    datamodule = _tiny(DATA / "msrvtt.json", "msrvtt", DATA / "features.npz", segmentation="fixed", segment_duration=5)
    ds = datamodule.dataset("test")
    batch = datamodule.collate_fn([ds[i] for i in range(len(ds))])
    real = batch["video_mask"][:, :, None] & batch["text_segment_mask"][:, None, :]
    assert torch.equal(batch["alignment_mask"], real)  # every caption describes every part
    info = json.loads((DATA / "msrvtt.json").read_text())
    sentences = [s for s in info["sentences"] if s["video_id"] == ds.video_ids[0]]
    assert len(ds[0]["token_counts"]) == len(sentences)


def test_jsonl_matches_youcook2() -> None:
    a = _tiny(DATA / "captions.jsonl", "jsonl", DATA / "features")
    table = read_jsonl(DATA / "captions.jsonl")
    reference = read_youcook2(DATA / "youcook2.json")
    assert table.text == reference.text and np.array_equal(table.start, reference.start)
    assert sum(len(a.dataset(s)) for s in ("train", "val", "test")) == 9


def test_tokenisation_is_cached(tmp_path) -> None:
    tokenizer = load_tokenizer(None)
    texts = ["cut the onion", "stir in the salt and pepper until smooth"]
    first = tokenize_captions(texts, tokenizer, 16, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("captions-*.npz"))) == 1
    again = tokenize_captions(texts, tokenizer, 16, cache_dir=tmp_path)
    assert np.array_equal(first.ids, again.ids) and np.array_equal(first.offsets, again.offsets)
    assert first.ids[first.offsets[0] : first.offsets[1]].tolist() == tokenizer(texts[0])["input_ids"]


def test_real_youcook2_annotations_end_to_end(shared_data) -> None:
    path = shared_data / "video_text" / "youcookii_annotations_trainval.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    datamodule = VideoTextDataModule(source="youcook2", annotations=str(path), limit_videos=80, max_tokens=(64, 2048))
    datamodule.setup()
    table = read_youcook2(path)
    counts = np.bincount(table.video, minlength=len(table.videos))[:80]
    served = {v: n for ds in datamodule.datasets.values() for v, n in zip(ds.video_ids, ds.lengths[:, 0], strict=True)}
    assert served == {v: int(c) for v, c in zip(table.videos[:80], counts, strict=True)}
    batch = next(iter(datamodule.train_dataloader()))
    model = small_model(datamodule)
    assert torch.isfinite(model.losses(batch, model.encode(batch))["loss"])


# -- bad input --------------------------------------------------------------------------------


def _youcook2(tmp_path: Path, edit) -> Path:
    database = json.loads((DATA / "youcook2.json").read_text())
    edit(database["database"])
    path = tmp_path / "youcook2.json"
    path.write_text(json.dumps(database))
    return path


@pytest.mark.parametrize(
    ("edit", "message", "video"),
    [
        (lambda d: d["vid00"]["annotations"][0].update(segment=[9, 3]), "end is not after its start", "vid00"),
        (lambda d: d["vid01"]["annotations"][0].update(segment=[1, 500]), "past the video's end", "vid01"),
        (lambda d: d["vid02"]["annotations"][0].update(sentence="   "), "caption is empty", "vid02"),
        (lambda d: d["vid03"].update(annotations=[]), "no segments", "vid03"),
        (lambda d: d.update(ghost={"duration": 9, "subset": "training", "annotations": []}), "no features", "ghost"),
    ],
)
def test_bad_annotations_name_the_video_and_row(tmp_path, edit, message, video) -> None:
    path = _youcook2(tmp_path, edit)
    with pytest.raises(VideoTextDataError, match=message) as err:
        _tiny(path, "youcook2", DATA / "features")
    assert str(path) in str(err.value)  # the annotation file, then the video
    assert f"video {video!r}" in str(err.value)
    with pytest.warns(UserWarning, match=r"skipped \d+ bad"):
        datamodule = _tiny(path, "youcook2", DATA / "features", errors="skip")
    assert any(message in reason for reason in datamodule.skipped)  # counted, by reason
    served = sum(len(datamodule.dataset(s)) for s in ("train", "val", "test"))
    videos_dropped = sum(
        n for reason, n in datamodule.skipped.items() if "no features" in reason or "no segments" in reason
    )
    assert served == len(json.loads(path.read_text())["database"]) - videos_dropped


def test_caption_for_a_missing_video(tmp_path) -> None:
    lines = (DATA / "captions.jsonl").read_text().splitlines()
    lines.append(json.dumps({"video_id": "nowhere", "start": 0, "end": 2, "text": "a caption"}))
    path = tmp_path / "captions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(VideoTextDataError, match="'nowhere'.*no features"):
        _tiny(path, "jsonl", DATA / "features")


def test_feature_dimension_mismatch(tmp_path) -> None:
    folder = tmp_path / "features"
    shutil.copytree(DATA / "features", folder)
    np.save(folder / "vid04.npy", np.zeros((30, 5), np.float32))
    with pytest.raises(VideoTextDataError, match=r"vid04.*dimension 5 differs from the expected 8"):
        _tiny(DATA / "youcook2.json", "youcook2", folder)


def test_malformed_lines_and_missing_files(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"video_id": "a", "start": 0, "end": 1, "text": "ok"}\n{"video_id": "b", "start": 0}\n')
    with pytest.raises(VideoTextDataError, match="line 2"):
        read_jsonl(path)
    with pytest.raises(FileNotFoundError, match="youcookii"):
        read_youcook2(tmp_path / "youcookii_annotations_trainval.json")
    with pytest.raises(FileNotFoundError, match="nothing.h5 not found"):
        open_features(tmp_path / "nothing.h5", fps=1)
    with pytest.raises(VideoTextDataError, match="needs video_id and caption"):
        (tmp_path / "m.json").write_text(json.dumps({"sentences": [{"caption": "x"}]}))
        read_msrvtt(tmp_path / "m.json")


@pytest.mark.parametrize(
    ("reader", "content", "message"),
    [
        (read_youcook2, {"database": {"v1": {"duration": 30, "annotations": [{"segment": ["a", 5], "sentence": "c"}]}}},
         r"video 'v1', annotation 0: needs segment \[start, end\] in seconds"),
        (read_youcook2, {"database": {"v1": {"duration": "n/a", "annotations": [{"segment": [0, 5], "sentence": ""}]}}},
         r"video 'v1': duration must be a number of seconds, got 'n/a'"),
        (read_msrvtt, {"videos": [{"id": "v1"}], "sentences": []}, r"videos\[0\]: needs a video_id"),
        (read_msrvtt, {"videos": [{"video_id": "v1", "start time": 0, "end time": "x"}], "sentences": []},
         r"video 'v1': end time must be a number of seconds"),
        (read_msrvtt, "{not json", "not valid JSON"),
        (read_jsonl, '{"video_id": "a", "start": 0, "end": 1, "text": "t", "duration": "n/a"}\n',
         r"line 1: duration must be a number of seconds, got 'n/a'"),
    ],
)  # fmt: skip
def test_annotation_values_of_the_wrong_type_name_file_and_video(tmp_path, reader, content, message) -> None:
    path = tmp_path / "annotations.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(VideoTextDataError, match=f"annotations.json.*{message}"):
        reader(path)


def test_non_finite_features_name_the_video_and_frames(tmp_path) -> None:
    folder = tmp_path / "features"
    shutil.copytree(DATA / "features", folder)
    feats = np.load(folder / "vid04.npy")
    feats[[3, 7], 1] = [np.nan, np.inf]
    np.save(folder / "vid04.npy", feats)
    datamodule = _tiny(DATA / "youcook2.json", "youcook2", folder)
    split, i = next(
        (s, list(ds.video_ids).index("vid04")) for s, ds in datamodule.datasets.items() if "vid04" in ds.video_ids
    )
    with pytest.raises(VideoTextDataError, match=r"video 'vid04': features hold NaN or inf in frame\(s\) \[3, 7\]"):
        datamodule.dataset(split)[i]


def test_dataset_index_and_lengths_without_loading(monkeypatch) -> None:
    table = CaptionTable.from_records(
        [("a", 0, 2, "one two", 0), ("a", 2, 5, "three", 1), ("b", 1, 3, "four five six", 0)],
        durations={"a": 6, "b": 4},
    )
    from varlen.datasets.video_text import SentenceFeatures

    store = SentenceFeatures(table, fps=2, dim=4, noise=0.1, seed=0)
    tokenized = tokenize_captions(table.text, load_tokenizer(None))
    calls = []
    monkeypatch.setattr(store, "load", lambda vid: calls.append(vid) or np.zeros((12, 4), np.float32))
    ds = VideoTextDataset(table, store, tokenized)
    assert ds.lengths.tolist() == [[2, int(tokenized.lengths[:2].sum())], [1, int(tokenized.lengths[2])]]
    assert calls == []  # lengths come from timestamps and token counts, not from the frames
    assert [ds[i]["index"] for i in range(len(ds))] == [0, 1]


# -- distributed ------------------------------------------------------------------------------


def test_ddp_fit_two_processes(tmp_path) -> None:
    ranks = ddp_fit(CONFIG, tmp_path, SMALL_CLI)
    assert ranks[0]["global_step"] == ranks[1]["global_step"] > 0
    assert ranks[0]["batches"] == ranks[1]["batches"] == ranks[0]["num_training_batches"]
    datamodule = VideoTextDataModule(**SMALL)
    datamodule.setup()
    served = sorted(ranks[0]["indices"] + ranks[1]["indices"])
    assert served == list(range(len(datamodule.dataset("train"))))


# -- batching: what the arguments say, and the budget on the real tensors ---------------------


def test_batch_size_is_used_when_no_budget_is_given() -> None:
    datamodule = VideoTextDataModule(**SMALL, batch_size=8)
    datamodule.setup()
    sampler = datamodule.train_dataloader().batch_sampler
    assert sampler.spec.batch_size == 8 and sampler.spec.max_tokens is None
    sizes = [len(b) for b in sampler]
    assert max(sizes) == 8 and sum(sizes) == len(datamodule.dataset("train"))
    default = VideoTextDataModule(**SMALL)
    assert default.max_tokens == DEFAULT_BUDGET and default.batch_size is None
    both = VideoTextDataModule(**SMALL, batch_size=8, max_tokens=(64, 512))  # the budget wins
    assert both.max_tokens == (64, 512) and both.batch_size is None


def _assert_tensors_within_budget(datamodule: VideoTextDataModule, budget: tuple[int, int]) -> None:
    """Collate every training batch; the padded tensors' element counts must hold the budget."""
    shared = 0
    for batch in datamodule.train_dataloader():
        video_axis = batch["frame_mask"] if datamodule.frames else batch["video_mask"]
        within = video_axis.numel() <= budget[0] and batch["text_mask"].numel() <= budget[1]
        # only a video over the budget on its own may exceed it, in a batch of its own
        assert within or len(batch["index"]) == 1, (tuple(video_axis.shape), tuple(batch["text_mask"].shape))
        shared += len(batch["index"]) > 1
    assert shared >= 3  # not vacuous: several batches hold several videos


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_tokens": (40, 600)},
        {"max_tokens": (2000, 800), "segmentation": "fixed", "segment_duration": 8.0, "frames": True},
        {"max_tokens": (600, 640), "frames": True, "max_frames_per_segment": 6, "pad_to_multiple_of": 8},
    ],
)
def test_collated_tensors_hold_the_budget_on_synthetic_data(overrides) -> None:
    datamodule = VideoTextDataModule(**SMALL, **overrides)
    datamodule.setup()
    _assert_tensors_within_budget(datamodule, overrides["max_tokens"])


def test_collated_tensors_hold_the_budget_on_youcook2_shapes(shared_data) -> None:
    path = shared_data / "video_text" / YOUCOOK2
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    budget = (1024, 1024)
    datamodule = VideoTextDataModule(
        source="youcook2",
        annotations=str(path),
        limit_videos=150,
        frames=True,
        max_frames_per_segment=16,
        synthetic_dim=4,
        max_caption_tokens=48,
        max_tokens=budget,
    )
    datamodule.setup()
    _assert_tensors_within_budget(datamodule, budget)


# -- metrics ----------------------------------------------------------------------------------


def _ranks_of(video: torch.Tensor, text: torch.Tensor) -> dict[str, float]:
    metric = RetrievalRanks()
    metric.update(video, text)
    return {k: float(v) for k, v in metric.compute().items()}


def test_retrieval_ranks_perfect_reversed_and_tied() -> None:
    eye = torch.eye(6)
    perfect = _ranks_of(eye, eye)
    assert perfect["t2v_R1"] == 1.0 and perfect["t2v_median_rank"] == 1.0
    assert perfect["t2v_R1_chance"] == pytest.approx(1 / 6)
    # each text is closest to every other video and farthest from its own: rank N
    reversed_ = _ranks_of(eye, 1.0 - eye)
    assert reversed_["t2v_R1"] == 0.0 and reversed_["t2v_R5"] == 0.0 and reversed_["t2v_median_rank"] == 6.0
    # a collapsed model scores every video alike: ties count against it, rank N (not 1)
    collapsed = _ranks_of(torch.ones(6, 4), torch.ones(6, 4))
    assert collapsed["t2v_R1"] == 0.0 and collapsed["t2v_median_rank"] == 6.0
    assert RetrievalRanks.ranks(torch.tensor([[1.0, 1.0, 0.0], [0.5, 0.9, 0.9], [0.0, 0.0, 1.0]])).tolist() == [2, 2, 1]


def test_median_rank_averages_the_two_middle_ranks() -> None:
    # ranks 1, 1, 2, 2 (videos 0/1 swapped for queries 2/3): the median is 1.5, not the lower 1
    video = torch.eye(4)
    text = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 0.9, 1.0], [0, 0, 1.0, 0.9]])
    out = _ranks_of(video, text)
    assert out["t2v_median_rank"] == 1.5 and out["t2v_R1"] == 0.5


def test_alignment_accuracy_and_its_chance_level(dm, monkeypatch) -> None:
    torch.manual_seed(0)
    model = small_model(dm).eval()
    batch = dm.collate_fn([dm.dataset("val")[i] for i in range(4)])
    target, real = batch["alignment_target"], batch["text_segment_mask"]
    valid = target != IGNORE_INDEX
    with torch.no_grad():
        out = model.encode(batch)
    # logits that pick the target for the first valid segment of every video and a wrong caption elsewhere
    wrong = (target.clamp_min(0) + 1) % real.sum(-1, keepdim=True)
    pick = torch.where(torch.arange(target.shape[1]) == 0, target.clamp_min(0), wrong)
    logits = torch.full_like(out["align_logits"], -5.0).masked_fill(~real[:, None, :], float("-inf"))
    logits.scatter_(-1, pick[..., None], 5.0)
    monkeypatch.setattr(model, "encode", lambda b: {**out, "align_logits": logits})
    monkeypatch.setattr(model, "log_metrics", lambda *args, **kwargs: None)  # no trainer here
    model._evaluate("val", batch)
    expected_acc = float((pick == target)[valid].float().mean())
    assert float(model.metrics["val_align_acc"].compute()) == pytest.approx(expected_acc)
    assert 0 < expected_acc < 1
    captions = real.sum(-1, keepdim=True).expand_as(target)[valid].float()
    assert float(model.metrics["val_align_chance"].compute()) == pytest.approx(float((1 / captions).mean()))


def test_captions_longer_than_the_position_table_raise_clearly(dm) -> None:
    model = VideoTextAligner(feature_dim=dm.feature_dim, vocab_size=dm.vocab_size, hidden=16, heads=2, max_positions=4)
    batch = dm.collate_fn([dm.dataset("val")[0]])
    with pytest.raises(ValueError, match="exceed max_positions=4"):
        model.encode(batch)


# -- truncation, features vs annotations, dimensions, workers ---------------------------------


def test_truncated_captions_are_counted_and_warned(tmp_path) -> None:
    tokenizer = load_tokenizer(None)
    texts = ["cut the onion", "stir in the salt and pepper until smooth and glossy", "boil"]
    with pytest.warns(UserWarning, match=r"1 of 3 texts .* max_length=6 .* truncated"):
        out = tokenize_captions(texts, tokenizer, 6, cache_dir=tmp_path)
    assert out.truncated == 1 and out.lengths.tolist()[1] == 6
    assert out.ids[out.offsets[1] : out.offsets[2]][-1] == tokenizer.sep_token_id  # the special token is kept
    with pytest.warns(UserWarning, match="truncated"):  # a cache hit reports it too
        assert tokenize_captions(texts, tokenizer, 6, cache_dir=tmp_path).truncated == 1
    with pytest.warns(UserWarning, match="truncated"):
        datamodule = _tiny(DATA / "youcook2.json", "youcook2", DATA / "features", max_caption_tokens=4)
    assert datamodule.truncated > 0


def _features_copy(tmp_path: Path, video: str, frames: np.ndarray) -> Path:
    folder = tmp_path / "features"
    shutil.copytree(DATA / "features", folder)
    np.save(folder / f"{video}.npy", frames)
    return folder


def test_features_shorter_than_the_annotated_duration(tmp_path) -> None:
    database = json.loads((DATA / "youcook2.json").read_text())["database"]
    last_end = max(a["segment"][1] for a in database["vid01"]["annotations"])
    short = np.load(DATA / "features" / "vid01.npy")[: last_end - 2]  # 2 frames short of its last segment
    folder = _features_copy(tmp_path, "vid01", short)
    with pytest.raises(VideoTextDataError, match=r"vid01.*past the end of the video's features"):
        _tiny(DATA / "youcook2.json", "youcook2", folder)
    with pytest.warns(UserWarning, match="skipped"):
        datamodule = _tiny(DATA / "youcook2.json", "youcook2", folder, errors="skip")
    assert datamodule.skipped.get("segment ends past the end of the video's features", 0) >= 1
    # a segment ending within one frame of the features' end is rounding, not an error
    np.save(folder / "vid01.npy", np.load(DATA / "features" / "vid01.npy")[: last_end - 1])
    _tiny(DATA / "youcook2.json", "youcook2", folder)


def test_video_with_no_feature_frames(tmp_path) -> None:
    folder = _features_copy(tmp_path, "vid02", np.zeros((0, 8), np.float32))
    with pytest.raises(VideoTextDataError, match=r"vid02.*no feature frames"):
        _tiny(DATA / "youcook2.json", "youcook2", folder)


def test_one_bad_first_file_does_not_set_the_expected_dimension(tmp_path) -> None:
    folder = _features_copy(tmp_path, "vid00", np.zeros((40, 5), np.float32))  # sorts first
    assert open_features(folder, fps=1).dim == 8  # the majority, not the first file
    with pytest.warns(UserWarning, match="skipped 1 bad"):
        datamodule = _tiny(DATA / "youcook2.json", "youcook2", folder, errors="skip")
    assert datamodule.feature_dim == 8
    assert datamodule.skipped == {"feature dimension 5 differs from the expected 8": 1}
    assert sum(len(datamodule.dataset(s)) for s in ("train", "val", "test")) == 8


def test_npz_member_headers_of_every_format_version(tmp_path) -> None:
    path = tmp_path / "features.npz"
    arrays = {"a": np.zeros((3, 4), np.float32), "b": np.ones((5, 4), np.float32), "c": np.ones((2, 4), np.float32)}
    with zipfile.ZipFile(path, "w") as zf:
        for (name, array), version in zip(arrays.items(), [(1, 0), (2, 0), (3, 0)], strict=True):
            with zf.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array, version=version)
    store = NpzFeatures(path, fps=1)
    assert [store.shape(k) for k in "abc"] == [(3, 4), (5, 4), (2, 4)] and store.dim == 4
    np.testing.assert_array_equal(store.load("b"), arrays["b"])


@pytest.mark.parametrize("features", ["features.npz", "features.h5"])
def test_file_stores_pickle_into_loader_workers(features) -> None:
    datamodule = _tiny(DATA / "youcook2.json", "youcook2", DATA / features, num_workers=2)
    store = datamodule.dataset("train").features
    vid = datamodule.dataset("train").video_ids[0]
    clone = pickle.loads(pickle.dumps(store))  # what a spawned worker receives
    np.testing.assert_array_equal(clone.load(vid), store.load(vid))
    seen = [i for batch in datamodule.train_dataloader() for i in batch["index"].tolist()]
    assert sorted(seen) == list(range(len(datamodule.dataset("train"))))
