"""Streaming from LitData chunks (the ``stream`` extra): writing a DataModule's training split as
chunks, and the size index beside them that varlen's plan reads instead of the data."""

from varlen.stream.chunks import ChunkList, read_index_json
from varlen.stream.engine import check_litdata
from varlen.stream.size_index import SizeIndex, write_size_index

__all__ = ["ChunkList", "SizeIndex", "check_litdata", "read_index_json", "write_size_index"]
