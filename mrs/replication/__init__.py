"""A replicated group's machinery: leadership in etcd and the stream of commits.

Its job: elect one active instance of a group through a coordinator (`coordinator`:
etcd over its JSON gateway in `etcd`, or in memory for tests and the simulator),
stream every commit of the active's journals to its replicas (`stream`, `wire`,
`active`), make them durable there and fence an old active off by its term
(`replica`). It knows nothing of sockets other than its own replication links and
nothing of the group's rooms: a commit is a list of `journals.WriteBatch`.

May import: `ops` and every layer below it (the root, `journals`, `storage`,
`config`, `transport`, ...). The server (`mrs.server.instance`) runs it.
"""
