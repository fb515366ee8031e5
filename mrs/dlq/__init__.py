"""The dead-letter handler: a runmqdlq-style rules table and the engine that applies it.

Layer: command side (above `audit`); a client application of the bus, so it may import
`clients`, `offline` and what lies below; nothing the server runs imports it.
"""
