"""The rules of delivery, with no I/O: which mode/UMA pairs exist and what each outcome
reports (`delivery`), sequence numbers that restarts cannot exhaust (`seqspace`), the
dead-letter header (`deadletter`), rate-limited refusal logging (`refusals`), the
timeout heap (`timers`), giving the C heap back (`heap`) and what a selective get
selects (`selection`, which the client library builds too).

Layer: may import only the root vocabulary (`mrs.model`, `mrs.errors`, `mrs.address`,
`mrs.limits`, `mrs.exit_status`) and `journals`.
"""
