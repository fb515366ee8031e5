"""The dead-letter handler: a runmqdlq-style rules table and the engine that applies it."""
