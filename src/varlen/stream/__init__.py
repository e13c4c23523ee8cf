"""Streaming from LitData chunks (the `stream` extra): writing a DataModule's training split as
chunks, the size index beside them that varlen's plan reads instead of the data (with each sample's
class and weights for weighted draws: `weighted_index`), and where a streamed dataset lives
(a local folder or a store's URL: `StreamSource`)."""

from varlen.stream.chunks import ChunkList, read_index_json
from varlen.stream.draw_index import WeightedSizeIndex, weighted_index
from varlen.stream.engine import check_litdata
from varlen.stream.size_index import SizeIndex, write_size_index
from varlen.stream.source import StreamSource

__all__ = [
    "ChunkList",
    "SizeIndex",
    "StreamSource",
    "WeightedSizeIndex",
    "check_litdata",
    "read_index_json",
    "weighted_index",
    "write_size_index",
]
