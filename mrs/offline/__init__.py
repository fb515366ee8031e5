"""Reading a group's journals from their files, without its server: where a bus's
journals are (`journal_files`), and which records a command selects (`selection`,
`scalars`); and how SIGTERM and SIGHUP stop a command as Ctrl-C does (`stop_signals`).

Layer: the lowest of the command side (`tools` and `dlq` share it); may import the
layers below and `clients` (a client's own SAF journal is read with its check).
"""
