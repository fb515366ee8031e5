"""Where bytes travel: a framed stream over a trio stream (`framed`, `plain_socket`),
real TCP or the simulator's memory (`network`), connection admission per peer address
(`admission`) and each connection's deadlines (`watchdog`).

Layer: may import the root vocabulary, `core`, `protocol`, `storage` and `config`.
Nothing here knows what a queue is.
"""
