"""A SAF drain into a full remote DQF sends each message about once: real `mrs serve`
processes, the scenario of benchmarks/drain_resends.py on a short run (group 2's DQF
holds 50, a producer puts 50/s to it from group 1, a consumer confirms every 30 ms;
then the link is cut and healed; then the producer stops and the backlog drains)."""

from __future__ import annotations

from benchmarks.drain_resends import measure

RATIO_MAX = 1.05
"""Link messages sent per message stored from the link, over the run and in every phase."""
AT_A_PHASE_EDGE_MAX = 10
"""Messages a phase may count as sent and the next as stored: those in flight when the
counts are read (50 puts/s and up to 200 ms of latency on a loaded machine)."""


async def test_a_drain_into_a_full_dqf_sends_each_message_about_once(tmp_path) -> None:
    run = await measure(tmp_path / "bus", fill_s=3.0, full_s=5.0, cut_s=3.0, backlog_s=3.0)
    phases = {phase.name: phase for phase in run.phases}
    assert set(phases) == {"fill", "full", "cut", "backlog"}
    for phase in run.phases:
        assert phase.stored > 0, phase
        assert phase.sent <= RATIO_MAX * phase.stored + AT_A_PHASE_EDGE_MAX, phase
    sent, stored = sum(p.sent for p in run.phases), sum(p.stored for p in run.phases)
    assert sent <= RATIO_MAX * stored, run.phases
    # One WARNING when the drain starts to wait, none per message refused, nor each
    # time the wait begins again at the edge of full (the backlog empties, the next
    # put is refused: three in 40 ms once): the DQF stays full through "full" and
    # "backlog" without a WARNING.
    assert phases["fill"].warnings == 1, phases["fill"]
    assert phases["full"].warnings == 0 and phases["backlog"].warnings == 0, phases
    # Nothing lost, nothing reordered: the consumer got a prefix of what was put, in order.
    assert run.delivered_seqs == run.put_seqs[: len(run.delivered_seqs)]
