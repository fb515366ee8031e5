"""Journal tools run from the shell: locate, select, dump, jplay, ledger, repair, archive."""
