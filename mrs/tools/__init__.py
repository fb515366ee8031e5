"""The operator's tools: the `mrs` command tree, journal tools, demo and bench.

The import rule (tests/rules/test_import_rules.py): tools may import the server's modules,
`clients` and `sim`; nothing in the server imports `mrs.tools`, so a tool can grow
without the server's process loading it.

Layer: the top; may import every layer, `clients` and `sim`. Nothing below imports it
(only `mrs/__main__.py`, the entry point).
"""
