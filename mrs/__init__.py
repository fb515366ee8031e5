"""MRS: a MessageQ-style message recovery service (guaranteed delivery on trio and LMDB)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("mrs")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
