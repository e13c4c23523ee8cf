"""varlen: Lightning DataModules for variable-length data, batched by size, padded by the batch.

Heavy modules (Lightning, transformers, RDKit, PyG) load only when you import the scenario
that needs them: ``from varlen.datamodules import TextClassificationDataModule``.
"""

__version__ = "0.1.0"
