"""A group's files on disk, around the `journals` library: one server per data directory
(`datadir`, `file_identity`), the start-up check of a journal in a child process
(`journal_check`), the reserve that stops new messages before the journal is full
(`journal_reserve`, `journal_measure`), fill warnings and map growth (`journal_usage`),
when the next commit may start (`commit_pacing`), the tester's fault file
(`fault_file`), and reading a journal's records from its files without the server
(`journal_scan`: the shell's tools and an application's journal reader).

Layer: may import `journals`, the root vocabulary and `core`.
"""
