"""MSR-VTT's retrieval protocols: the four files users have, their bad rows, and the 1k-A metrics.

The tiny files in `tests/data/video_text/msrvtt/` (written by `tests/data/video_text/data.py`):
13 videos, the JSON's split train 0-6 / validate 7 / test 8-12, three captions each; the 9k list
is video0-8, the 7k list video0-6, the test pairs one sentence for each of video9-12. Every frame
of a video is the indicator of its three topic words and every caption holds each of them once,
so a caption's bag of topic words equals its video's features.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from varlen.cli import dispatch as cli
from varlen.datamodules.video_text import VideoTextDataModule
from varlen.datasets.video_text import read_msrvtt_protocol
from varlen.datasets.video_text.captions import MSRVTT_DATA_URL
from varlen.errors import DataError, DatasetNotFoundError
from varlen.models.retrieval import CaptionEmbeddings, retrieval_metrics
from varlen.models.video_text import VideoTextAligner
from varlen.prepare.report import DataReport
from varlen.prepare.splits import random_split

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent / "data" / "video_text"
MSRVTT = HERE / "msrvtt"
CONFIG = ROOT / "configs" / "video_text_msrvtt.yaml"
spec = importlib.util.spec_from_file_location("video_text_data", HERE / "data.py")
DATA = importlib.util.module_from_spec(spec)
spec.loader.exec_module(DATA)

JSON, PAIRS, FEATURES = "MSRVTT_data.json", "MSRVTT_JSFUSION_test.csv", "features.npz"
NINE_K, SEVEN_K = "MSRVTT_train.9k.csv", "MSRVTT_train.7k.csv"


def files(folder: Path = MSRVTT, train: str | None = NINE_K, pairs: str | None = PAIRS, **kwargs) -> dict:
    """DataModule arguments over the MSR-VTT files in `folder`."""
    args = {"source": "msrvtt", "annotations": str(folder / JSON), "features": str(folder / FEATURES)}
    args |= {"train_list": train and str(folder / train), "test_pairs": pairs and str(folder / pairs)}
    return {**args, "batch_size": 4, "max_tokens": None, **kwargs}


def built(**kwargs) -> VideoTextDataModule:
    dm = VideoTextDataModule(**files(**kwargs))
    dm.prepare_data()
    dm.setup()
    return dm


def captions(dataset) -> list[list[str]]:
    """Each video's captions, as the dataset serves them."""
    return [dataset.captions(i) for i in range(len(dataset))]


def json_captions(vid: str) -> list[str]:
    return [s["caption"] for s in json.loads((MSRVTT / JSON).read_text())["sentences"] if s["video_id"] == vid]


def pair_sentences() -> dict[str, str]:
    with (MSRVTT / PAIRS).open() as f:
        return {row["video_id"]: row["sentence"] for row in csv.DictReader(f)}


def copy(tmp_path: Path) -> Path:
    folder = tmp_path / "msrvtt"
    shutil.copytree(MSRVTT, folder)
    return folder


def ids(dm: VideoTextDataModule, split: str) -> list[str]:
    return dm.dataset(split).video_ids


# -- the four layouts, end to end ------------------------------------------------------------


def test_9k_train_list_and_1k_a_test_pairs() -> None:
    dm = built()
    test = dm.dataset("test")
    assert test.video_ids == DATA.TEST_PAIRS
    assert captions(test) == [[pair_sentences()[v]] for v in DATA.TEST_PAIRS]  # one sentence each, the pairs'
    train, val = ids(dm, "train"), ids(dm, "val")
    assert sorted(train + val, key=DATA.TRAIN_9K.index) == DATA.TRAIN_9K and not set(train) & set(val)
    for seed in (0, 3):  # a seeded share of the listed videos (the test videos are not among them)
        carved = random_split(9, {"train": 0.85, "val": 0.15}, seed, "video-text val split")["val"]
        assert ids(built(seed=seed), "val") == [DATA.TRAIN_9K[i] for i in carved]
    for split in ("train", "val"):  # every caption of a listed video, from the JSON
        ds = dm.dataset(split)
        assert captions(ds) == [json_captions(v) for v in ds.video_ids]
    assert dm.report.unused("JSON caption of a test-pair video") == 4 * DATA.CAPTIONS_PER_VIDEO
    assert dm.report.unused("neither the train list") == 0
    assert built().report.to_dict() == dm.report.to_dict()  # mapped, the build's report replayed
    for split in ("train", "val", "test"):  # through the loaders: every sample once
        served = torch.cat([batch["index"] for batch in getattr(dm, f"{split}_dataloader")()])
        assert sorted(served.tolist()) == list(range(len(dm.dataset(split)))), split


@pytest.mark.parametrize("train", [SEVEN_K, None])
def test_7k_train_list_keeps_the_official_validation_split(train) -> None:
    dm = built(train=train)  # without a list, the JSON's train split trains (the same videos here)
    assert ids(dm, "train") == DATA.TRAIN_7K and ids(dm, "val") == ["video7"] and ids(dm, "test") == DATA.TEST_PAIRS
    assert dm.report.unused("test video outside the test pairs") == 1  # video8
    assert dm.report.unused("caption of a video left out") == DATA.CAPTIONS_PER_VIDEO


def test_the_json_alone_keeps_its_own_split() -> None:
    dm = built(train=None, pairs=None)
    splits = DATA.MSRVTT_SPLITS
    for split, name in (("train", "train"), ("val", "validate"), ("test", "test")):
        assert ids(dm, split) == [f"video{v}" for v, s in enumerate(splits) if s == name]
    assert captions(dm.dataset("test")) == [json_captions(v) for v in ids(dm, "test")]


def test_a_train_list_without_test_pairs_tests_on_the_other_test_videos() -> None:
    dm = built(pairs=None)
    assert ids(dm, "test") == DATA.TEST_PAIRS  # the JSON's test videos outside the 9k list, every caption
    assert [len(c) for c in captions(dm.dataset("test"))] == [DATA.CAPTIONS_PER_VIDEO] * 4
    assert sorted(ids(dm, "train") + ids(dm, "val"), key=DATA.TRAIN_9K.index) == DATA.TRAIN_9K


def test_features_decide_each_videos_length() -> None:
    # the JSON's times say 6-15 s; the features may be sampled at any rate (here 2 fps)
    dm = built(fps=2.0, segmentation="fixed", segment_duration=2.0)
    sample = dm.dataset("test")[0]
    frames = np.load(MSRVTT / FEATURES)[DATA.TEST_PAIRS[0]].shape[0]
    assert sample["text_times"].tolist() == [[0.0, frames / 2.0]]


# -- bad rows and files -----------------------------------------------------------------------


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line + "\n")


def _edit_pair(folder: Path, video: str, sentence: str) -> None:
    path = folder / PAIRS
    rows = list(csv.reader(path.open()))
    for row in rows:
        if row[2] == video:
            row[3] = sentence
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def _drop_features(folder: Path, video: str) -> None:
    arrays = dict(np.load(folder / FEATURES))
    del arrays[video]
    np.savez(folder / FEATURES, **arrays)


@pytest.mark.parametrize(
    ("edit", "message", "skipped", "served"),
    [
        (lambda f: _append(f / PAIRS, "ret4,msr99,video99,a dog and a car"),
         r"MSRVTT_JSFUSION_test\.csv, video 'video99': captions refer to a video with no features in .*features\.npz",
         {"no features": 1}, {"test": 4}),
        (lambda f: _drop_features(f, "video3"),
         r"MSRVTT_data\.json, video 'video3': captions refer to a video with no features", {"no features": 1},
         {"test": 4}),
        (lambda f: _edit_pair(f, "video10", "  "),
         r"MSRVTT_JSFUSION_test\.csv, video 'video10', line 3 \(.*\): caption is empty",
         {"caption is empty": 1, "no segments left": 1}, {"test": 3}),
        (lambda f: _append(f / PAIRS, "ret9,msr9"), r"MSRVTT_JSFUSION_test\.csv, line 6 .*needs video_id and sentence",
         {"needs video_id and sentence": 1}, {"test": 4}),
        (lambda f: _append(f / NINE_K, "video77"),
         r"MSRVTT_train\.9k\.csv, line 11, video 'video77': listed video has no captions in the JSON",
         {"no captions in the JSON": 1}, {}),
        (lambda f: _append(f / NINE_K, " "), r"MSRVTT_train\.9k\.csv, line 11 .*needs a video_id",
         {"needs a video_id": 1}, {}),
    ],
)  # fmt: skip
def test_bad_rows_name_file_row_and_video_or_are_counted(tmp_path, edit, message, skipped, served) -> None:
    folder = copy(tmp_path)
    edit(folder)
    with pytest.raises(DataError, match=message):
        built(folder=folder)
    with pytest.warns(UserWarning, match="skipped"):
        dm = built(folder=folder, on_bad="skip")
    for reason, count in skipped.items():
        assert dm.report.skipped(reason) == count, str(dm.report)
    assert dm.report.num_skipped == sum(skipped.values())
    for split, count in served.items():
        assert len(dm.dataset(split)) == count


@pytest.mark.parametrize(
    ("name", "header", "message"),
    [
        (PAIRS, "key,vid_key,video_id,caption", r"MSRVTT_JSFUSION_test\.csv: no column 'sentence' \(header: "),
        (PAIRS, "key,vid_key,video,sentence", r"no column 'video_id'.*needs a header with video_id, sentence"),
        (NINE_K, "vid", r"MSRVTT_train\.9k\.csv: no column 'video_id' \(header: \['vid'\]\)"),
    ],
)
def test_a_missing_column_raises_under_both_policies(tmp_path, name, header, message) -> None:
    folder = copy(tmp_path)
    lines = (folder / name).read_text().splitlines()
    (folder / name).write_text("\n".join([header, *lines[1:]]) + "\n")
    for on_bad in ("raise", "skip"):
        with pytest.raises(DataError, match=message):
            read_msrvtt_protocol(folder / JSON, folder / NINE_K, folder / PAIRS, DataReport(on_bad))


def test_a_train_list_that_holds_test_videos_raises(tmp_path) -> None:
    folder = copy(tmp_path)
    _append(folder / NINE_K, "video10")
    for on_bad in ("raise", "skip"):
        with pytest.raises(DataError, match=r"9k\.csv lists 1 video\(s\) of the test pairs \(e\.g\. \['video10'\]\)"):
            read_msrvtt_protocol(folder / JSON, folder / NINE_K, folder / PAIRS, DataReport(on_bad))


@pytest.mark.parametrize("missing", [JSON, NINE_K, PAIRS])
def test_a_missing_file_says_what_to_fetch(tmp_path, missing) -> None:
    folder = copy(tmp_path)
    (folder / missing).unlink()
    with pytest.raises(DatasetNotFoundError, match=rf"{missing}.*not found.*To get it: download {MSRVTT_DATA_URL}"):
        built(folder=folder)


def test_the_test_pairs_given_as_annotations_say_where_they_go() -> None:
    with pytest.raises(DataError, match=r"JSFUSION_test\.csv: a CSV, not the MSR-VTT caption JSON.*as test_pairs="):
        VideoTextDataModule(**files(train=None, pairs=None, annotations=str(MSRVTT / PAIRS))).setup()
    with pytest.raises(ValueError, match="MSR-VTT files"):
        VideoTextDataModule(source="youcook2", annotations="a.json", test_pairs=str(MSRVTT / PAIRS))


# -- the shipped config -------------------------------------------------------------------------


def test_the_config_without_the_users_files_says_what_to_fetch(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # the config's data/msrvtt/ paths are relative: nothing here
    args = yaml.safe_load(CONFIG.read_text())["data"]["init_args"]
    with pytest.raises(DatasetNotFoundError, match=r"data/msrvtt/features\.h5.*To get it: extract them"):
        VideoTextDataModule(**args)
    features = f"--data.init_args.features={MSRVTT / FEATURES}"
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", str(CONFIG), features])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert f"not found (looked in: data/msrvtt/{JSON})" in err and MSRVTT_DATA_URL in err


def test_the_config_runs_the_protocol_on_the_tiny_files(tmp_path) -> None:
    paths = {"annotations": JSON, "train_list": NINE_K, "test_pairs": PAIRS, "features": FEATURES}
    overrides = [f"--data.init_args.{k}={MSRVTT / v}" for k, v in paths.items()]
    small = ["--model.init_args.d_model=16", "--model.init_args.embed_dim=16", "--model.init_args.nhead=2"]
    run = ["--trainer.max_epochs=1", f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false"]
    result = cli.main(["fit", "--config", str(CONFIG), *overrides, *small, *run])
    metrics = result.trainer.callback_metrics
    assert {"val/t2v_R1", "val/v2t_R1", "val/caption_t2v_R1", "val/caption_v2t_median_rank"} <= set(metrics)
    result.trainer.test(result.model, datamodule=result.datamodule, verbose=False)
    metrics = result.trainer.callback_metrics
    for direction in ("t2v", "v2t"):  # one sentence per test video: the caption protocol is the paired one
        for name in ("R1", "R5", "R10", "median_rank"):
            assert float(metrics[f"test/caption_{direction}_{name}"]) == float(metrics[f"test/{direction}_{name}"])
    assert float(metrics["test/t2v_R1_chance"]) == pytest.approx(1 / 4)


# -- the 1k-A protocol's metrics --------------------------------------------------------------


def _metrics(*args) -> dict[str, float]:
    return {k: float(v) for k, v in retrieval_metrics(*args).items()}


def test_square_ranks_of_both_directions_by_hand() -> None:
    video = torch.eye(3)
    text = torch.tensor([[1.0, 0, 0], [1.0, 0, 0], [0, 0, 1.0]])  # text 1 looks like video 0
    out = _metrics(video, text)
    # t2v: text 0 -> video 0 first (rank 1); text 1 scores 0 for its video, as for video 2 (tie): rank 3
    assert out["t2v_R1"] == pytest.approx(2 / 3) and out["t2v_median_rank"] == 1.0 and out["t2v_R5"] == 1.0
    # v2t: video 0 ties texts 0 and 1 (rank 2); video 1 scores every text 0 (rank 3); video 2 rank 1
    assert out["v2t_R1"] == pytest.approx(1 / 3) and out["v2t_median_rank"] == 2.0
    assert out["t2v_R1_chance"] == out["v2t_R1_chance"] == pytest.approx(1 / 3)


def test_several_captions_per_video_rank_a_video_by_its_best_caption() -> None:
    video = torch.eye(2)
    caption = torch.tensor([[1.0, 0], [0, 1.0], [1.0, 1.0]])
    out = _metrics(video, caption, torch.tensor([0, 0, 1]))
    # t2v, one query per caption: ranks 1, 2 (caption 1 looks like video 1), 2 (a tie)
    assert out["t2v_R1"] == pytest.approx(1 / 3) and out["t2v_median_rank"] == 2.0
    # v2t: video 0's best caption (0) ranks 1; video 1's only caption ties caption 1: rank 2
    assert out["v2t_R1"] == 0.5 and out["v2t_median_rank"] == 1.5 and out["v2t_R5"] == 1.0
    assert out["t2v_R1_chance"] == 0.5 and out["v2t_R1_chance"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    # with one caption per video it is the square case
    square = torch.randn(5, 4)
    assert _metrics(square, square.flip(0)) == _metrics(square, square.flip(0), torch.arange(5))


def test_caption_embeddings_do_not_depend_on_the_order_of_gathered_shards() -> None:
    torch.manual_seed(0)
    video, caption_video = torch.randn(6, 4), torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 5])
    caption = video[caption_video] + 0.9 * torch.randn(9, 4)
    expected = _metrics(video, caption, caption_video)
    metric = CaptionEmbeddings()
    for videos in ([4, 5], [0, 2], [1, 3]):  # shards in any order, captions with their video's sample index
        rows = torch.isin(caption_video, torch.tensor(videos))
        metric.update(video[videos], torch.tensor(videos), caption[rows], caption_video[rows])
    gathered = metric.compute()
    assert _metrics(*gathered) == expected


def bag_of_words(texts: list[str]) -> torch.Tensor:
    """`[N, 16]` counts of the topic words: what the tiny features are built to equal."""
    words = {w: k for k, w in enumerate(DATA.TOPIC_WORDS)}
    out = torch.zeros(len(texts), len(words))
    for i, text in enumerate(texts):
        for word in text.split():
            if word in words:
                out[i, words[word]] += 1
    return out


def test_1k_a_metrics_with_features_equal_to_the_caption_embeddings() -> None:
    test = built().dataset("test")
    video = torch.from_numpy(np.array(test.video.values))  # one pooled segment per test video: its features' mean
    text = bag_of_words([c[0] for c in captions(test)])
    assert torch.equal(video, text)
    out = _metrics(video, text)
    for direction in ("t2v", "v2t"):
        assert out[f"{direction}_R1"] == 1.0 and out[f"{direction}_median_rank"] == 1.0


def test_1k_a_metrics_with_shuffled_features(tmp_path) -> None:
    folder = copy(tmp_path)
    arrays = dict(np.load(folder / FEATURES))
    rolled = DATA.TEST_PAIRS[1:] + DATA.TEST_PAIRS[:1]  # each test video gets the next one's features
    np.savez(folder / FEATURES, **{**arrays, **{v: arrays[w] for v, w in zip(DATA.TEST_PAIRS, rolled, strict=True)}})
    test = built(folder=folder).dataset("test")
    out = _metrics(torch.from_numpy(np.array(test.video.values)), bag_of_words([c[0] for c in captions(test)]))
    # disjoint topics: a caption scores 1 for the video holding its features and 0 for the other
    # three, its own among them; ties count against it, so every rank is 4 of 4 (chance R@1 is 1/4)
    for direction in ("t2v", "v2t"):
        assert out[f"{direction}_R1"] == 0.0 and out[f"{direction}_R5"] == 1.0
        assert out[f"{direction}_median_rank"] == 4.0


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_the_aligners_1k_a_metrics_do_not_depend_on_the_batching(layout) -> None:
    dm = built(layout=layout)
    torch.manual_seed(0)
    model = VideoTextAligner(dm.feature_dim, dm.vocab_size, dm.pad_token_id, d_model=16, nhead=2, embed_dim=8).eval()
    test = dm.dataset("test")

    def evaluate(chunks) -> dict[str, float]:
        for chunk in chunks:
            model._evaluate("test", dm.collate_fn(test.__getitems__(chunk)))
        return {k: float(v) for k, v in model.split_metrics("test").items()}

    with torch.no_grad():
        whole, pieces = evaluate([[0, 1, 2, 3]]), evaluate([[3], [1, 2], [0]])
    assert whole.keys() == pieces.keys()
    for name, value in whole.items():
        assert pieces[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    for name in ("t2v_R1", "t2v_R5", "t2v_median_rank", "v2t_R1", "v2t_median_rank"):
        assert whole[f"test/caption_{name}"] == whole[f"test/{name}"], name
