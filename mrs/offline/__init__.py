"""Reading a group's journals from their files, without its server: where a bus's
journals are (`journal_files`), and which records a command selects (`selection`,
`scalars`).

Layer: below the command-side folders (`tools`, `dlq`, `audit`) that share it; may
import `journals`, the root vocabulary, `core` and `config`.
"""
