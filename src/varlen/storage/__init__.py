"""What lies on disk: Arrow tables written once and mapped zero-copy (`tables`), the cache folder and atomic
writes (`cache`), data checksums (`checksums`), where the shipped data is found (`paths`)."""
