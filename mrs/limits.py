"""Every built-in bound and default of MRS in one place, names with units last.

A bound that an operator may change lives in the config (`[group.limits]`,
`[group.guards]`); what is here are the values the code itself is built around: the
defaults those settings start from, the ranges they may take, and the fixed caps on
every queue, buffer and table in memory. A module imports the names it needs; nothing
else spells these numbers. Values that belong to a format (the seq layout, the
journal record) stay with the format; `journals` keeps its own (it imports nothing
of `mrs`).
"""

from __future__ import annotations

# ------------------------------------------------------------------ messages
PRIORITY_MAX = 99
"""MessageQ priorities are 0..99."""
CORRELATION_ID_BYTES_MAX = 32
"""MessageQ's correlation id is 32 bytes."""
PUT_TIMEOUT_S_DEFAULT = 30.0
"""MessageQ's default when the put timeout is 0 (also the DLQ handler's and jplay's)."""
IDEMPOTENCY_KEY_BYTES_MAX = 256
"""Longest idempotency key a put may carry."""
HEADERS_BYTES_MAX = 32 * 1024
"""A message's headers, msgpack-encoded, at most. Every frame that carries a message
(its delivery, a link transfer, a dead letter with the header the group adds) has
64 KiB above message_bytes_max for everything but the body: headers that filled a
put's frame made a delivery larger than any frame, and the group stopped."""

# ------------------------------------------------------------------ wire
FRAME_BYTES_MAX_DEFAULT = 2 * 1024 * 1024
"""Largest frame a connection accepts unless told otherwise."""
CLIENT_FRAME_BYTES_MAX = 64 * 1024 * 1024
"""Largest frame the client library accepts (a delivery carries a whole message)."""
NEST_DEPTH_MAX = 100
"""Deepest nesting accepted inside the dict fields of an event (info,
dead_letter_header): a hostile frame cannot exhaust the stack."""
RECEIVE_BYTES_MAX = 64 * 1024
"""Bytes asked of one receive_some (server sessions, links, clients).

Also how much one connection brings to one round of the server's loop (every ready
receive loop handles one receive, then the group commits): 64 KiB is about 60 puts
of 1 KiB. Measured in peerbench's shapes against 256 KiB (benchmarks/README.md, 2 interleaved
rounds): puts 1.19x, put -> get -> confirm 1.29x with its latency p50 2 s -> 0.1-0.3 s,
since a consumer's gets and confirms no longer wait behind a producer's 230-put
rounds; 16 and 32 KiB made rounds too small (more commits), 96-128 KiB sat between."""
ADDRESSES_CACHED_MAX = 4096
"""Addresses remembered by the caches on the per-message paths (a client's deliveries,
the server's records read back): least recently used ones are dropped beyond it, so a
process that sees many queues stays bounded."""
OUTBOX_BYTES_HIGH = 8 * 1024 * 1024
"""Unwritten bytes on one connection, both ways: the server stops reading a client's
requests while this much of its replies is unsent; the client library holds a new
request back while this much of its own is (clients.pending `Requests.outbox_room`)."""
UNREAD_ANSWERS_NOTE_BYTES_MIN = 64 * 1024
"""Growth of a connection's unread answers counted at once in the group's total
(mrs.transport.unread_answers; smaller growth waits for its next write or receive):
counting each answer would cost a call per answer on the hot path."""
COMMIT_COMPANY_WAIT_S = 0.003
"""How long a commit of batches that can wait (confirms of consumers with gets parked)
waits for one that cannot, to share its fsync (mrs.server.group_server's commit loop). Longer than
the gap between puts at 1,000 msgs/s: at 1 ms the wait often ran out just before the
next put came (docs/journals.md "Group commit")."""
COMMIT_GAP_S = 0.002
"""After a busy commit (at least COMMIT_GAP_BATCHES_MIN batches), the next one starts no
sooner than this after it ended (mrs.storage.commit_pacing): the loop takes in more requests
first, so fewer fsyncs stall it per message."""
COMMIT_GAP_BATCHES_MIN = 32
"""A commit with fewer batches than this is not busy: the next one goes at once (a
lightly loaded group answers as soon as its disk allows)."""
PUT_BATCH_ITEMS_MAX = 1000
"""Puts in one PutBatch frame at most (the client's put_many splits longer lists)."""
PUT_GROUP_BYTES_MAX = RECEIVE_BYTES_MAX
"""Bytes of puts a client groups into one PutBatch at most (mrs.transport.framed `send_put`):
about what the server takes in one receive. Why not PUT_BATCH_BYTES_MAX: the server
handles a frame only once it has all of it, so a 1 MiB frame of a thousand puts made
the producer and the server take turns (43k against 68k puts/s); frames of what one
receive brings keep the server working on the first puts while the rest arrive."""
ANSWER_BATCH_ITEMS_MAX = 1000
"""Answers in one AnswerBatch frame at most (a server with more ready sends more frames)."""
GET_BATCH_ITEMS_MAX = 1000
"""Messages one GetBatch may ask for at most (the client's get_many)."""
PENDING_QUEUES_MAX = 100
"""Queues one ShowPending (the client's `pending`, MessageQ's putil_show_pending) may
name at most: the answer is one count per queue, and queues of other groups are
asked over their links in one frame per group."""
PENDING_QUERY_WAIT_S = 5.0
"""How long a group waits for another group's pending counts before it answers the
client TIMEOUT: a link that went silent is declared lost only after its heartbeats
(15 s), and the client would stop waiting first."""
JOURNAL_READ_CHUNK_MESSAGES = 256
"""Records an application's journal reader (clients.journal_reader) reads in one read
transaction: a reader holds the server's old pages only that long, however slowly
it iterates."""
QUEUE_NAME_CHARS_MAX = 256
"""Characters of a queue name or address a Locate or ShowPending may carry: longer
than any `GROUP.QUEUE` a config can declare, so longer text is refused BADPARAM."""
JOURNAL_PAGE_RECORDS_MAX = 256
"""Records one JournalPage (a remote journal reader's page, `Client.open_journal`)
carries at most: the group reads it in one short read transaction on its event loop,
so a reader on another host never holds the group's old pages or its loop for long."""
JOURNAL_PAGE_BYTES_MAX = 1 << 20
"""Record bytes one JournalPage carries at most (one bigger record still goes alone,
within the client's CLIENT_FRAME_BYTES_MAX)."""
JOURNAL_PAGE_SCAN_MAX = 1024
"""Records the group looks at for one JournalPage at most: a selection that matches
little answers a short (even empty) page that says where to go on, so no request
scans the whole journal; sized so one page holds the group's loop for a few
milliseconds (benchmarks/README.md, "Journal pages")."""
JOURNAL_SELECT_ITEMS_MAX = 100
"""Queues, classes or types one ReadJournal's selection lists at most (each list)."""
GET_POOL_BATCH_MAX = 128
"""Messages one GetBatch of the client's pool of waiting gets asks for at most
(clients.get_pool); more waiting callers are asked for in several batches. Why not
GET_BATCH_ITEMS_MAX: a 1,000-message DeliveryBatch is a 1 MiB frame the client must
receive whole before it decodes its first message, and a consumer's lanes all served
by one answer then confirm together and ask together, in lockstep. Chosen by
measurement (benchmarks/README.md, "Gets that wait together")."""
READ_AHEAD_MAX = 512
"""Messages one GetBatch may take beyond count_max (its read_ahead_max): memory-only
messages that need no confirm and nobody waits on (e.g. MRS_ACKs), lent to the
client ahead of its gets and given back if it closes first (mrs.group.batch_get)."""
LENT_REMEMBERED_MAX = 2 * 1024
"""Read-ahead messages a queue remembers as lent (the client may still give them
back) at most; the oldest are forgotten first: a client holds at most
HELD_MESSAGES_MAX, so one lent that long ago was taken."""
LENT_BYTES_MAX = 4 << 20
"""...and bodies of at most about this many bytes (a client reads ahead one
DeliveryBatch, about DELIVERY_BATCH_BYTES_MAX, at a time)."""
GIVE_BACK_WAIT_S = 1.0
"""A closing client waits at most this long for its batches in flight to be answered
and its GiveBack written (clients.pending `Requests.give_back_held`)."""
DELIVERY_BATCH_BYTES_MAX = 1 << 20
"""A DeliveryBatch stops adding messages once it holds this many bytes of bodies
(it always holds at least one)."""
PUT_BATCH_BYTES_MAX = 1 << 20
"""Bodies in one PutBatch frame at most; the client also keeps the whole frame near
this size, so it fits the server's frame limit (at least this plus 64 KiB). A
bigger message goes alone as a plain Put."""

HTTP_REQUEST_BYTES_MAX = 8 * 1024
"""Largest request head the metrics/status HTTP endpoint reads."""
HTTP_REQUEST_DEADLINE_S = 5.0
"""An HTTP request must arrive whole within this long."""
HTTP_CONNECTIONS_MAX = 64
"""HTTP connections served at once by all of a process's endpoints (the metrics and
the web view share them); more wait in the listen backlog."""
STATUS_BUILD_INTERVAL_S = 0.1
"""The group's status (a StatusRequest, the web view's /api/status, a /metrics
scrape) is built at most once per this interval, however many ask; each asker gets
one built after it asked (mrs.ops.http_endpoint `SharedBuild`,
mrs.server.status_answers). Why: it is built on the group's own event loop, and four
pollers asking in a loop built it ~2,000 times a second and took half of the group's
WF puts/s (four clients keeping 8 StatusRequests in flight each, 80-90%). A page
polls every 2 s and Prometheus every 15 s: a tenth of a second costs them nothing."""
OPEN_FILES_KEPT_MIN = 128
"""Descriptors a server keeps for itself, never given to connections: its journals,
logs, listeners, HTTP_CONNECTIONS_MAX web requests, a child's pipes
(mrs.transport.open_files)."""

# ------------------------------------------------------------------ server, per group
QUEUE_MESSAGES_MAX_DEFAULT = 10_000
"""A queue's messages_max when the config gives none."""
QUEUE_UNCONFIRMED_MAX_DEFAULT = 1_000
"""A queue's unconfirmed_max (EXCMAXUNCONF) when the config gives none."""
JOURNALED_BODIES_BYTES_MAX = 64 * 1024 * 1024
"""Bodies of recoverable messages a queue keeps in memory while they wait; later
arrivals keep theirs only on disk (read back at delivery). A count alone (the group's
first 1,000) let 1,000 messages of 1 MiB hold a gigabyte per queue."""
CLIENT_DRAIN_IDLE_S = 5.0
"""A connection that sent no drained put for this long has finished draining."""
CLIENT_DRAINS_LISTED_MAX = 1000
"""Draining client connections listed in the status at most."""
DEDUPE_PURGE_INTERVAL_S = 600.0
"""How often expired idempotency keys are purged."""
DEDUPE_PURGE_BATCH_MAX = 10_000
"""Keys purged in one transaction at most."""
DEDUPE_PURGE_SCAN_MAX = 20_000
"""Keys one step of the purge's sweep looks at, at most (a few ms on the event loop)."""
DEDUPE_PURGE_STEP_S = 0.25
"""The pause between two steps of one sweep of the keys: a sweep goes on until it has
looked at every key, then the next starts DEDUPE_PURGE_INTERVAL_S later."""
PEER_NOTICE_WAITERS_MAX = 100_000
"""Puts awaiting a linked group's notice (got, confirmed) kept at most per group
(mrs.group.peers): an AK_DEQ / AK_ACK put has no deadline, and its notice never comes
when that group lost the memory message in a restart."""
PUT_ONCE_BUSY_RETRY_S = 0.05
"""How long `clients.put_once` waits before sending again a copy refused QUEUE_BUSY
(an earlier copy with its key still being stored: a commit takes milliseconds)."""
DEDUPE_WAITERS_MAX = 1_000
"""Copies of a message waiting for the commit of an earlier copy with the same dedupe
key (one group, all keys). Beyond it an application's put is refused QUEUE_BUSY
before it is answered (try again later); a peer's copy is answered LINK_DOWN, so the
peer keeps it in its SAF and sends it again (the dedupe stores it once)."""
ACCEPT_BATCH_MAX = 64
"""Connections the accept loop takes per wake-up at most (mrs.transport.network): a flood of
junk connections costs one round of the scheduler per batch, not per connection,
and the loop still lets the other tasks run between batches."""
ACCEPTS_PER_S_MAX = 2000
"""New connections the accept loop takes per second at most, from all peers together
(mrs.transport.network). Past it, connections wait in the kernel's backlog, and once
that is full a flooder's connects stall there. The event loop's share of the CPU,
and with it the producers', is kept whatever the flooder sends. Legitimate clients
reconnect far below this rate."""
ADMISSION_ANSWER_INTERVAL_S = 1.0
"""A refused peer is answered (not just dropped) at most this often."""
ADMISSION_PEERS_MAX = 65_536
"""Peer addresses remembered; idle ones are forgotten first when the table fills."""
REFUSAL_LOG_INTERVAL_S = 10.0
"""One log line per (limit, peer) at most this often."""
REFUSAL_KEYS_MAX = 4096
"""Distinct (limit, peer) pairs remembered; beyond this the table starts afresh."""
DENIAL_LOG_INTERVAL_S = 1.0
"""The permission gate: one log line per (principal, problem) at most this often."""
CREDENTIALS_CHECK_INTERVAL_S = 0.5
"""With [auth], how often a running group looks at its credentials file (two stats)
besides at each new connection and on SIGHUP: a `mrs creds remove` then ends the
removed principal's connections within this, even when nobody else connects."""
CREDENTIALS_FILE_BYTES_MAX = 16 << 20
"""A credentials file (and a secret file) is read whole: one larger than this is
refused. A principal takes about 300 bytes, so 16 MiB holds some 50,000 of them;
`mrs creds list --file /dev/zero` read until memory ran out, and a group reloading
such a file would have done the same."""
SLOW_COMMIT_S = 1.0
"""A journal commit longer than this is a WARNING in the group's log (rate-limited):
the disk is slow or stalled, and every answer waited for it."""
CERT_EXPIRY_WARN_S = 14 * 86400.0
"""A running group with [group.tls] logs a WARNING once its certificate or CA expires
within this (14 days; an ERROR once expired), every CERT_EXPIRY_CHECK_S."""
CERT_EXPIRY_CHECK_S = 6 * 3600.0
"""How often a running group looks at its certificates' end dates (and logs)."""
TLS_REFUSAL_LOG_INTERVAL_S = 1.0
"""The TLS listener: one log line per (host, reason) a refused handshake had at most
this often."""
PARTIAL_FRAMES_FRAMES_MIN = 2
"""partial_frames_bytes_max is taken as at least this many maximal frames, so a group
whose message_bytes_max is above it still takes in two large messages at once."""
HEAP_TRIM_RELEASED_BYTES_MIN = 16 * 1024 * 1024
"""Bytes of unfinished frames let go (their connection closed) before the heap's free
pages are given back to the system (mrs.transport.partial_frames)..."""
HEAP_TRIM_INTERVAL_S = 1.0
"""...at most this often: a trim walks the heap (milliseconds)."""
DATA_DIR_CHECK_INTERVAL_S = 1.0
"""How often a running server looks at its data directory between commits."""
JOURNAL_CHECK_INTERVAL_S = 1.0
"""How often the journal-usage warnings are re-evaluated."""
JOURNAL_WALK_TIMEOUT_S = 600.0
"""Longest a full journal check may walk before it gives up."""
JOURNAL_PROBLEMS_PER_CHECK_MAX = 5
"""Disagreements a journal check names per kind (mrs.storage.journal_check.cross_check): the
first few say where the damage is; a damaged page can misfile thousands."""
RESERVE_MEASURE_INTERVAL_S = 0.05
"""How often the journal reserve re-measures the free space of the map."""

PEER_TEXT_CHARS_MAX = 300
"""At most this much of a text a peer sent (a program name, a queue name, a refusal
built from them) goes into a log line or back in an answer: the frame allows MiBs,
and one connection's 1 MB program name once wrote a 1 MB log line per attempt."""

LINK_DIRECT_MESSAGES_MAX = 10_000
"""Messages waiting for a link's window (sent directly, not through the SAF) at most.
A put beyond it does not wait in memory: a recoverable one goes to the SAF
(SAF_FORCED, drained in order), a nonrecoverable one takes its UMA (MRS_RES_EXH)."""
LINK_DIRECT_BYTES_MAX = 64 * 1024 * 1024
"""...and bodies of at most about this many bytes, as a queue keeps of its journaled
bodies (JOURNALED_BODIES_BYTES_MAX): the count alone let a peer group that stopped
reading (SIGSTOP, a hung host: its link is lost only after its heartbeats) hold
10,000 messages of 1 MiB, 10 GB, in the sender's memory (2,000 of 100 KB measured:
+200 MiB). Past it puts go as past the count."""
SAF_KEYS_DELIVERED_MAX = 10_000
"""Idempotency keys of keyed recoverable puts a peer group stored, remembered per peer
by the sending group (the newest; mrs.group.saf_keys): a copy put while the link is
down is answered as the copy it is, with no SAF record and no MRS_ACK of its own."""

# ------------------------------------------------------------------ config ranges
CONFIG_FILE_BYTES_MAX = 16 << 20
"""A bus file is read whole: one larger than this is refused (a bus of thousands of
queues is well under 1 MiB; `--config /dev/zero` read until memory ran out)."""
CONFIG_COUNT_MAX = 2**32 - 1
"""Record counts are kept in 32 bits (the seq counter's width)."""
CONFIG_MESSAGE_BYTES_MAX = 1 << 30
"""A message travels in one frame (at most 2**32-1 bytes with its headers) and is held
in memory and in one LMDB value: 1 GiB keeps every copy well inside those limits."""
CONFIG_JOURNAL_BYTES_MIN = 1 << 20
"""Below 1 MiB the LMDB map cannot hold the journals' tables and the start-up commit."""
CONFIG_JOURNAL_BYTES_MAX = 1 << 44
"""16 TiB: LMDB maps the whole file into the address space (47 bits on x86-64)."""
GUARD_SECONDS_MAX = 86_400.0
"""No guard deadline or interval may exceed a day: a typo of 1e9 would disable it."""
GUARD_SECONDS_MIN = 0.05
"""No guard deadline or interval may be shorter than 50 ms: a loaded host's scheduling
delay alone exceeds it. A group given `heartbeat_interval_s = 0.000001` and
`link_silence_s_max = 0.000002` loaded, then declared every link down as it came up
and closed every client (`mrs status` too) as silent: it served nothing."""
GUARD_COUNT_MAX = 10_000_000
"""Highest count a guard may be set to."""
GUARD_BYTES_MAX = 1 << 40
"""Highest byte count a guard may be set to."""

# ------------------------------------------------------------------ client library
REPLY_GRACE_S = 5.0
"""A request waits this much longer than its own timeout for the server's answer
before the client gives up (ReplyTimeout)."""
CLIENT_DRAIN_WINDOW_MESSAGES = 1024
"""Client SAF journal records in flight at once while draining (pipelined, FIFO)..."""
CLIENT_DRAIN_REFILL_MESSAGES = 128
"""...topped up once this many have been answered."""
CLIENT_DRAIN_BYTES_MAX = 8 * 1024 * 1024
"""...and at most about this many body bytes (the server bounds each connection's)."""
CLIENT_REQUESTS_IN_FLIGHT_MAX = 10_000
"""Requests of one client connection awaiting an answer at once; one more is refused
at once with EXCEEDQUOTA (QuotaExceeded), as the server refuses beyond its
requests_in_flight_max guard (same default)."""
CLIENT_RESEND_MESSAGES_MAX = 10_000
"""Puts a client of a replicated group (several addresses) keeps for re-sending at most:
a recoverable put whose answer was lost with the connection waits for the new active
and is re-sent under its idempotency key (clients.resend); one more beyond this (or
beyond CLIENT_RESEND_BYTES_MAX) raises PutOutcomeUnknown as on a single server."""
CLIENT_RESEND_BYTES_MAX = 64 * 1024 * 1024
"""...and the body bytes those puts hold at most."""
CLIENT_REQUEST_WAIT_S_DEFAULT = 60.0
"""How long `confirm`, `confirm_many`, `status`, `locate` and `pending` wait for their
answer unless given a `timeout=` of their own (`connect(request_timeout_s=)` sets
another for a connection): then ReplyTimeout. Why a bound: the server answers a
confirm only once its commit is durable, and its heartbeats go on while its disk
stalls, so without one a confirm behind a stalled commit waited for ever
(clients.answer_waits)."""
CLIENT_RESEND_WAIT_S = 60.0
"""How long a put of a replicated group's client waits for a connection to the new
active before it gives up and raises what the lost connection said (a failover takes
the lease TTL + ~1 s)."""
HELD_MESSAGES_MAX = 1024
"""Messages a client holds back (delivered for a get its caller gave up) at most:
held messages plus what gets waiting or given up may still bring stay within it; a
get beyond it is refused EXCEEDQUOTA (clients.pending `Requests.reserve_get`). Read-ahead
messages come on top (at most READ_AHEAD_MAX, asked for only when none is held)."""
HEARTBEAT_S_DEFAULT = 5.0
"""Ping the server after this long without a byte from it..."""
HEARTBEATS_SILENT_MAX = 3
"""...and count the connection lost after this many intervals of silence."""
HEARTBEAT_S_INSTANCES_DEFAULT = 2.0
"""The default ping interval of a client given a replicated group's instances: an
active that stops answering without closing its connections (a paused process or
machine) is passed over within about 6 s, the lease's time plus a few seconds,
rather than after 15 s of silence at HEARTBEAT_S_DEFAULT (benchmarks/README.md, "A
paused active"). Not less: the group's loop stalls for each commit's fsync, and a
disk slow for a few seconds must not look like a paused active to every client (a
spurious reconnect brings a get in flight back POSSDUPL)."""
CLIENT_CLOSE_WAIT_S = 1.0
"""A closing client waits this long at most for the server to give its queue back
(half-close, then the server's own close) before it closes anyway."""
CLIENT_SAF_MESSAGES_MAX_DEFAULT = 1_000_000
"""Records a client SAF journal holds at most unless told otherwise."""
CLIENT_SAF_BYTES_MAX_DEFAULT = 1 << 30
"""Bytes a client SAF journal holds at most unless told otherwise."""
CLIENT_SAF_DELETE_RETRY_S = 1.0
"""How long a client SAF drain waits before it sends again records whose delete
failed (the disk full): without it they stayed in the journal, JOURNAL_ON and the
backlog for ever, though the server had them, and a restart a dedupe window later
would deliver them twice."""
CLIENT_SAF_REFUSALS_MAX = 5
"""Refusals in a row a drained record takes before it is kept aside (next one)."""
CLIENT_SAF_REFUSALS_SPAN_S = 60.0
"""A drained record the group refuses this many times in a row, over at least this
long, with a status that says "try again" and that a record can cause itself
(SERVER_ERROR, TIMEOUT, EXCEEDQUOTA once the drain's window is one record) is kept
aside as refused (clients.saf_drain.SafDrain._refused_again): before, it was sent
again for ever and every record behind it waited (FIFO)."""

EVENT_LOG_BYTES_MAX = 64 << 20
"""A group's event log (`events.jsonl`: DISCL's lines) is started anew past this, the
last one kept as `events.jsonl.1`: one line per DISCL put must not fill the disk."""

# ------------------------------------------------------------------ demo
DEMO_MESSAGES_MAX = 100_000
"""The most orders `mrs demo --messages` sends: it keeps each one's id and delivery to
check them, and it is a story told in minutes, not a load test (`mrs bench` is)."""

# ------------------------------------------------------------------ DLQ handler
DLQ_TABLE_BYTES_MAX = 1024 * 1024
"""The largest rules table read (14,000 full 72-column lines): a table is read whole
and checked before anything runs, so a wrong file (a log, a disk image, /dev/zero)
is refused with one line instead of filling the memory."""
DLQ_HANDLER_WINDOW_DEFAULT = 32
"""Dead letters the handler has in flight at once."""
DLQ_HANDLER_POLL_S = 1.0
"""A parked get returns at least this often, so WAIT(nnn) and reports stay timely."""
DLQ_RETRY_INTERVAL_S_MIN = 1.0
"""The shortest wait between two attempts of a failing rule, whatever RETRYINT says
(`RETRYINT(0)` is taken as this): a retry is a put the server answers at once when it
refuses, so no wait at all would be a loop as fast as the server can refuse."""
DLQ_HANDLER_SEEN_MAX_DEFAULT = 10_000
"""Dead letters whose retry count the handler remembers at most."""
DLQ_HANDLER_HELD_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
"""Bodies of the dead letters the handler works at once (waiting for a retry, or
behind an earlier letter to the same destination), in bytes; past it no new letter
is taken until some leave. The count alone (`--seen-max`) let 10,000 letters of
1 MiB make a 10 GiB handler; a letter it leaves (IGNORE) keeps no body."""
DLQ_HANDLER_CONFIRM_TRIES_MAX = 5
"""Times the handler sends the DLQ confirm of one letter when the group answers that
it could not record it (JOURNAL_FAIL, MRS_RES_EXH) or does not answer, before it
leaves the letter held (reported) rather than end with exit 3."""
DLQ_HANDLER_CONFIRM_PAUSE_S = 0.2
"""The wait before the second send of a failed DLQ confirm; doubled before each next
one (0.2 + 0.4 + 0.8 + 1.6 s with DLQ_HANDLER_CONFIRM_TRIES_MAX = 5)."""
DLQ_HANDLER_RETURNS_MAX = 5
"""A dead letter the handler has already put back out this many times (it came back
each time: a loop through a rule or its destination) is left on the DLQ, reported."""
DEAD_LETTER_FIELD_CHARS_MAX: dict[str, int] = {
    "struc_id": 4,
    "dest_q_name": 48,
    "dest_q_mgr_name": 48,
    "format": 8,
    "put_appl_type": 8,
    "put_appl_name": 28,
    "put_date": 8,
    "put_time": 8,
}
"""MQDLH's fixed field lengths (MQ_Q_NAME_LENGTH 48, MQ_FORMAT_LENGTH 8,
MQ_PUT_APPL_NAME_LENGTH 28, ...): an application's own dead-letter header may not
carry more, so a DLQ handler never matches against megabytes of header."""
DLQ_MATCH_CHARS_MAX: dict[str, int] = {
    "APPLIDAT": 32,
    "APPLNAME": 28,
    "APPLTYPE": 8,
    "DESTQ": 48,
    "DESTQM": 48,
    "FEEDBACK": 12,
    "FORMAT": 8,
    "MSGTYPE": 12,
    "PERSIST": 12,
    "REASON": 12,
    "REPLYQ": 48,
    "REPLYQM": 48,
    "USERID": 12,
}
"""Characters of each pattern keyword's value the handler matches, as the MQ fields
they stand for hold (UserIdentifier 12, ApplIdentityData 32, ...): a value any
sender can set (a `user_id` header) is cut to its MQ length, not matched whole."""

# ------------------------------------------------------------------ links and groups
LINK_BACKOFF_S_MIN = 0.05
"""A link's first redial waits this long..."""
LINK_BACKOFF_S_MAX = 2.0
"""...doubling up to this."""
LINK_HANDSHAKE_TIMEOUT_S = 5.0
"""A dialed link must finish its Hello/Welcome within this long."""
LINK_WINDOW_MESSAGES_MAX = 2048
"""Messages a link has sent and not yet had answered at most (its window)."""
LINK_WINDOW_BYTES_MAX = 8 * 1024 * 1024
"""Bytes of the frames a link has sent and not yet had answered at most, beside
LINK_WINDOW_MESSAGES_MAX (one message bigger on its own still goes, alone): a peer
that stops reading left 2,048 messages of 1 MiB in the sender's outbox."""
LINK_TRANSFER_MESSAGES_MAX = 256
"""Messages in one transfer frame at most."""
LINK_TRANSFER_BYTES_MAX = 1 << 20
"""Bodies per transfer frame (one bigger message still goes alone): with the peer's
message_bytes_max this bounds every frame a link sends."""
LINK_FRAME_OVERHEAD_BYTES = 64 * 1024
"""Room for a transfer frame's fields around its bodies."""
LINK_RETRY_S_MIN = 0.2
"""A link whose drain is refused (RETRY) waits this long at first..."""
LINK_RETRY_S_MAX = 5.0
"""...doubling up to this."""
LINK_NOTICES_PER_FRAME_MAX = 512
"""Notices (confirmed, dequeued, ...) in one link frame at most."""
LINK_RESET_KEYS_BATCH_MAX = 10_000
"""Dedupe keys of a peer group deleted per commit by `mrs admin reset-link`
(mrs.group.incarnation): a group that linked for years may hold millions."""
BODIES_IN_MEMORY_PER_QUEUE_MAX = 1000
"""A journaled message further back in its queue than this keeps its body only on
disk (read back at delivery), so memory stays flat while a DQF backlog grows."""
ACKS_OWED_PER_PEER_MAX = 10_000
"""MRS_ACKs for one other group's queues journaled and not yet answered by it."""
RECENT_ACKS_MAX = 100_000
"""MRS_ACKs from other groups remembered (by origin group and seq), to drop a resent one."""
RECEIPTS_PER_PEER_MAX = 10_000
"""Notices kept for one group whose link is down (beyond: dropped, and logged)."""
RECEIPTS_PER_FRAME_MAX = 512
"""Receipts in one link frame at most."""

AUDIT_CHECK_ROWS_MAX = 100_000
"""Problem rows (gaps, duplicates, correlation prefixes) one audit check brings back to
the driver (`mrs.audit.reconcile`); past it the report says `checks_truncated`."""
AUDIT_LISTED_MAX = 50
"""Gaps and duplicates the audit report lists one by one; the totals count them all."""
ADMIN_ACTION_CHARS_MAX = 32
"""Characters of an AdminRequest's action name (`browse`, `purge`, `move`, ...)."""
ADMIN_BROWSE_MESSAGES_MAX = 1000
"""Messages one `mrs admin browse` shows at most (`--limit`): a look, not a dump."""
ADMIN_BROWSE_DEFAULT = 20
"""Messages `mrs admin browse` shows without `--limit`."""
ADMIN_PREVIEW_BYTES_MAX = 64
"""Bytes of each body a browse shows (as text or hex), so a browse frame stays small."""
ADMIN_REPLY_BYTES_MAX = 512 * 1024
"""Bytes of the messages one browse answer describes (their headers may hold 32 KiB
each), or of the lines one `journal` answer carries, at most: half the smallest frame
a group sends (1 MiB + 64 KiB), so the answer always leaves in one frame; the answer
says `truncated`, and a smaller --limit (or a browse's `select`) shows the rest."""
ADMIN_MOVE_MESSAGES_MAX = 500
"""Messages one AdminRequest `move` (or `purge`) takes at most: the command repeats the
request until the queue is empty, so a crash of either side leaves at most this many
in one request's commits, each message in one transaction of its own."""
ADMIN_REQUEST_WAIT_S = 60.0
"""How long a client waits for an AdminRequest's answer (a move's commits included)."""
ADMIN_LOG_RECORDS_MAX = 10_000
"""Admin journal lines a group keeps in its journals (mrs.ops.admin_log), so that they
follow a replicated group through a failover; its data directory's file keeps all."""
ADMIN_REFUSAL_LINES_MAX = 20
"""Refused admin actions of one principal journaled one by one per
ADMIN_REFUSAL_INTERVAL_S at most (the next)."""
ADMIN_REFUSAL_INTERVAL_S = 10.0
"""Refused admin actions journaled one by one per principal per interval at most; the
rest are counted and journaled as one line when the interval ends (mrs.ops.admin_log):
a principal without rights asking in a loop cost a synced line each and pushed the
last purge out of the ADMIN_LOG_RECORDS_MAX lines `mrs admin journal` shows."""
ADMIN_REFUSAL_ACTIONS_MAX = 16
"""Action names one such count line names (a flood of made-up names: the rest as one)."""
HTTP_BODY_BYTES_MAX = 16 * 1024
"""Bytes of a POST body the web view reads at most (a login form, an action's JSON)."""
WEB_SESSION_S = 8 * 3600.0
"""A web view login lasts this long (then log in again)."""
WEB_SESSIONS_MAX = 256
"""Web view logins remembered at once; the oldest is forgotten beyond."""
WEB_LOGIN_FAILURE_DELAY_S = 1.0
"""A failed web login is answered this much later (guessing passwords costs time)."""
WEB_PASSWORD_CHECKS_MAX = 1
"""Web view password checks (PBKDF2, off the event loop) run at a time; the rest wait."""
ADMIN_SELECT_SCAN_MAX = 10_000
"""Waiting messages a selective browse looks through at most (from the front)."""
ALARM_USE_HIGH = 0.8
"""An alarm (mrs.ops.alarms: the web page, `mrs status`, `mrs_alarms`) is raised when a
use reaches this fraction of its bound: a queue's memory (queue_bytes_max,
messages_max), the journal's map (journal_bytes_max less its reserve), the DQF, SAF
and DLJ records (dqf/saf/dlj_messages_max). RabbitMQ's memory alarm defaults to 0.4
of the RAM because it then pages to disk; MRS refuses at the bound itself, so the
alarm comes late enough to mean something and early enough to act."""
DISK_FREE_ALARM_RESERVES_MIN = 2
"""The disk alarm is raised when the data directory's disk has less free space than
this many journal reserves (new recoverable messages are refused under one)."""
# ------------------------------------------------------------------ priority and selection
SELECTION_KEYS_MAX = 8
"""Keys one selective get may carry (MessageQ's pams_set_select array is as short)."""
SELECT_INDEX_MESSAGES_MAX = 1_000_000
"""Pending messages one queue's selection index holds (mrs.group.select_index): about
330 bytes each in memory with 16-byte correlation ids (benchmarks/selective_get.py
measures it), so at most ~330 MB per queue that selective gets read. A message beyond
it is not indexed: selective gets do not see it until it is read back into the window."""
SELECT_SCAN_MESSAGES_MAX = 10_000
"""Messages a selective get looks at when its keys are not indexed (source, ne, an
ordering key) or the index is incomplete: it answers from those it saw, never reads
more per get."""
SELECT_SCANNED_PER_ROUND_MAX = 2 * SELECT_SCAN_MESSAGES_MAX
"""Messages the selective gets of one connection's round (one receive,
RECEIVE_BYTES_MAX) look at before the server lets the other connections go first
(mrs.server.request_dispatch `Dispatcher.dispatch_all`): two full looks. Why: one
receive of a thousand selective gets that matched nothing held the group's loop, and
every other client's answer, for seconds (benchmarks/README.md)."""
# ------------------------------------------------------------------ replicated groups
REPLICATION_INSTANCES_MIN = 3
"""A replicated group has this many instances at least (one active, two replicas: a
majority of three survives the loss of one); one instance is an unreplicated group."""
REPLICATION_LEASE_TTL_S_DEFAULT = 5
"""The active's etcd lease: another instance may take over this long after the last
renewal ([coordinator] lease_ttl_s)."""
REPLICATION_LEASE_TTL_S_MIN = 2
"""etcd grants no shorter lease that renewals can keep alive reliably."""
REPLICATION_RENEW_FRACTION_DEFAULT = 4
"""The active renews its lease every TTL / this."""
REPLICATION_STEP_DOWN_FRACTION_DEFAULT = 0.5
"""An active that has not renewed for this fraction of the TTL stops answering, well
before the lease can expire and a replica be promoted."""
REPLICATION_BACKLOG_BYTES_MAX = 64 << 20
"""Bytes of commits a replica has not acknowledged at most: beyond, it leaves the
in-sync set (while the others hold every answer) and catches up from a full copy later."""
REPLICATION_BACKLOG_RECORDS_MAX = 100_000
"""Commits a replica has not acknowledged at most (same rule as the bytes)."""
REPLICATION_FRAME_BYTES_MAX = 256 << 20
"""One replication frame (a commit, or a slice of a full copy) at most."""
REPLICATION_COPY_SLICE_BYTES = 1 << 20
"""A full copy goes to a replica in slices of about this many bytes, each read from
the journals when the one before is sent (the event loop runs in between: the active
keeps answering during a rejoin)..."""
REPLICATION_COPY_SLICE_ITEMS_MAX = 10_000
"""...and of at most this many records (many small records cost a slice its time)."""
REPLICATION_DIAL_S_MIN = 0.05
"""The active redials a replica after this long at first..."""
REPLICATION_DIAL_S_MAX = 1.0
"""...doubling up to this, while its links end without an acknowledgement (a replica
that cannot store: it is not sent its backlog again twenty times a second)."""
REPLICATION_FAIL_LINGER_S = 1.0
"""A replica that cannot store keeps the link open this long at most after saying so,
for the active to read why before it closes the link itself."""
REPLICATION_POLL_S = 0.2
"""A replica looks at the leader key in etcd this often (no watch on the gateway)."""
COORDINATOR_LOG_INTERVAL_S = 30.0
"""While the coordinator does not answer, a replica logs it once, then at most this
often with the count of tries (it asks every REPLICATION_POLL_S)."""
CENSUS_WAIT_LOG_S = 10.0
"""An instance waiting this long for the same instances' census (a new group, or etcd's
data lost) says which, once (mrs.server.instance): a new group whose third instance
was started against another etcd or [coordinator] prefix never started, silently."""
ELECTION_WAIT_LOG_S = 10.0
"""A replica that has waited this long for the same instances before it may campaign (no
active, and an answered record may be on them alone) says which, once
(mrs.server.instance `_say_waiting`): before, a group whose active and other in-sync
replica were both down waited for ever with nothing in any log."""
REPLICATION_ETCD_TIMEOUT_S = 2.0
"""One request to etcd at most, before the next endpoint is tried."""
REPLICATION_LAG_S_MAX = 1.0
"""An in-sync replica that has not acknowledged a commit this long after it was sealed
leaves the in-sync set (while the replicas left hold every answer given)."""
REPLICATION_PING_S = 1.0
"""An idle replication link (no record to send) carries a ping this often, which the
replica answers (mrs.replication.active `_stream`)."""
REPLICATION_SILENT_S_MAX = 5.0
"""A replica that answers pings and has answered nothing this long on an idle link is
taken for lost: the link ends, and it leaves the in-sync set REPLICATION_LAG_S_MAX
later (a machine powered off, a cut that drops packets: no TCP close comes)."""
REPLICATION_HELLO_ANSWER_S_MAX = 30.0
"""The active waits this long at most for a replica's answer to its hello, then drops
the link and dials again (mrs.replication.active `_hello_answered`). Generous: a replica
asks etcd (REPLICATION_ETCD_TIMEOUT_S per endpoint) and flushes its term before it
answers a hello that raises its term."""
REPLICATION_REST_HOLD_S = 0.005
"""A record goes to an in-sync replica no answer waits for (mrs.replication.link_out
`write_first` did not pick it) at most this long after the active flushed it, with the
records sealed meanwhile: one send, one flush and one acknowledgement there for
several commits (benchmarks/README.md, "The other replica's records held for
company"). Far below REPLICATION_LAG_S_MAX: such a replica stays in sync."""
REPLICATION_LATE_S = 0.0015
"""An answer still waiting this long after its record was sealed ends the hold of the
in-sync replica no answer waits for (REPLICATION_REST_HOLD_S): the replica written first
is late, and the held one's acknowledgement may answer it. Above a replicated commit's
usual round trip, so a replica on time keeps its company (the values tried:
benchmarks/README.md, "A held replica that does not wait behind a late one")."""
REPLICATION_APPLY_RECORDS_MAX = 256
"""A replica applies at most this many records already received in one synced
transaction (one fsync and one acknowledgement for a burst of commits)."""
PCJ_ARCHIVE_RUNS_KEPT_MAX = 16
"""Summaries of the PCJ archive runs `mrs pcj archive` asked a replicated group's active
for, kept by run id for the command to find in `mrs status --json`."""
REPLICATION_HANDOVER_FALLBACK_S = 10.0
"""An instance that handed its term over (`mrs failover`) and sees nobody take the next
term this long takes it back itself (mrs.replication.coordinator `handed_over_unclaimed`):
the chosen replica was lost between its acknowledgement and its campaign."""
REPLICATION_HANDOVER_WAIT_S = 5.0
"""A planned switch-over (`mrs failover`) waits this long at most for the answers held
to be released and the chosen replica to have every record, before it resigns."""
REPLICATION_STOP_HANDOVER_S_MAX = 10.0
"""A SIGTERMed active hands its term over (as `mrs failover` does) within this at most,
then gives its lease up all the same (mrs.replication.active `Active.stop_handing_over`):
each step of a hand-over waits REPLICATION_HANDOVER_WAIT_S at most, and a service
manager's stop (systemd: 90 s) must not have to SIGKILL it."""
JVM_ARCHIVE_BUILD_S_MAX = 600
"""A build of the audit's JVM class archive claimed longer ago than this died (a
reboot): another audit may build it (mrs.audit.jvm_archive)."""

ENDPOINT_BIND_RETRY_S = 1.0
"""How often a replicated group's active tries again to take a `[group.ops]`
endpoint's port that another process holds (a paused old active on the same host):
once a second, as the active dials a lost replica (mrs.ops.http_endpoint)."""

GROUP_ID_MIN = 1
"""The lowest group id a bus file may give (here, not in mrs.config.schema, so the
client library checks an address without importing the bus file's schema)."""
GROUP_ID_MAX = 32000
"""The highest group id a bus file may give, as MessageQ's group numbers."""
QUEUE_ID_MIN = 1
"""The lowest queue id a bus file may give."""
QUEUE_ID_MAX = 999
"""The highest queue id, as MessageQ's queue numbers."""
