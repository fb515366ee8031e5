"""The compiled hot path: which modules mypyc builds (`loader`), how (`build`).

Layer: imports only the standard library, because `mrs/__init__` runs `loader.install()`
before any other module of `mrs` or `journals` is imported. It names the modules it
compiles (of `journals`, `mrs` and `clients`) as strings, so `journals` itself names
nothing of MRS.
"""
