"""MRS: a MessageQ-style message recovery service (guaranteed delivery on trio and LMDB)."""

from mrs.native import loader as _native

_native.install()  # first: the compiled hot path, if built and current (mrs.native)


def __getattr__(name: str) -> str:
    """`mrs.__version__`, looked up when first asked for: importing `importlib.metadata`
    and scanning the installed distributions costs ~0.1 s, which every process
    importing `mrs` paid at start (the server's journal check child among them)."""
    if name != "__version__":
        raise AttributeError(f"module 'mrs' has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("mrs")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version
