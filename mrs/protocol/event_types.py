"""The event classes the per-message paths build or test, each a `Final` name.

Why: compiled code (mrs.native.loader) reads a module-level name that is not `Final`
from its module's dict on every use, and `wire.PutDone` is that plus a module
attribute lookup (benchmarks/README.md; docs/native.md, "What costs in compiled code"). This
module is compiled, so each name here is a C static, and every compiled module that
imports it reads that static directly: one place for them, not an alias block in
each module that builds or tests an event per message.
"""

from __future__ import annotations

from typing import Final

from mrs.protocol import events

PUT: Final = events.Put
PUT_BATCH: Final = events.PutBatch
PUT_DONE: Final = events.PutDone
GET: Final = events.Get
GET_BATCH: Final = events.GetBatch
CANCEL_GET: Final = events.CancelGet
CONFIRM: Final = events.Confirm
CONFIRMED: Final = events.Confirmed
DELIVERY: Final = events.Delivery
DELIVERY_BATCH: Final = events.DeliveryBatch
ANSWER_BATCH: Final = events.AnswerBatch
FAILURE: Final = events.Failure
