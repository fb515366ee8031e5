"""Harness-only code: fuzz targets and their seed inputs (`mrs fuzz`, benchmarks/fuzz.py,
tests). Nothing the server runs imports this folder.

Layer: top (beside `tools`): may import everything below it.
"""
