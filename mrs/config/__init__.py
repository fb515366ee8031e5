"""The bus configuration: one TOML file, checked completely when loaded (`bus`: load it;
`parse`: walk the document; `fields`: one value and its check; `schema`: the frozen
dataclasses the rest of MRS reads) and its tables (`guards`, `ops`, `auth`, `tls`).

Layer: may import the root vocabulary, `core`, `protocol` and `storage`; everything
above it reads its dataclasses and never parses TOML itself.
"""
