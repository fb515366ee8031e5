"""The group server: trio TCP sessions in front of a `mrs.group.Group`.

`group_server.GroupServer` owns the listener, the journals (`journal_files`) and the
links (`links`); `connections` serves one TCP connection (admission, handshake,
receive loop, watchdog), `session` is that connection as the server holds it,
`request_dispatch` and `dispatch` hand each request to the group within the
connection's quotas. `startup` words why a group could not start; `harness` and
`gc_tuning` are the process's switches.

Layer: may import every layer below it (`group`, `security`, `ops` and what they
stand on); nothing below imports the server.
"""
