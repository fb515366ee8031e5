"""Filter pushdown is exact: for any conjunction of pushed comparisons, the scan
yields precisely the records a plain evaluation of the same filters keeps (no Spark
needed: the planner and the scan run on a real LMDB journal)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from journals import Journal, JournalStore, WriteBatch, seq_key
from mrs.audit import scan
from mrs.audit.source import push
from tests.journal_helpers import T0_NS, record

RECORDS = 120
SEQ_STEP = 7


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    path = tmp_path_factory.mktemp("pushdown") / "journals"
    store = JournalStore(path)
    batch = WriteBatch.empty()
    records = []
    for i in range(RECORDS):
        item = record(
            i,
            seq=1000 + i * SEQ_STEP,
            target_queue=10 + i % 4,
            source_group=1 + i % 3,
            priority=i % 10,
            confirm_time_ns=0 if i % 11 == 0 else T0_NS + i * 1_000_000_000,
        )
        records.append(item)
        batch.put_record(Journal.PCJ, seq_key(item.seq), item)
    store.commit_now(batch)
    store.close()
    return path, records


COLUMNS = {  # column -> (value of a record, strategy of literals)
    "seq": (lambda r: r.seq, st.integers(990, 1000 + RECORDS * SEQ_STEP + 10)),
    "target_queue": (lambda r: r.target_queue, st.integers(9, 14)),
    "source_group": (lambda r: r.source_group, st.integers(0, 4)),
    "priority": (lambda r: r.priority, st.integers(-1, 10)),
    "confirm_time": (
        lambda r: r.confirm_time_ns // 1000 if r.confirm_time_ns else None,
        st.integers(-5, RECORDS + 5).map(
            lambda s: datetime.datetime.fromtimestamp(T0_NS / 1e9 + s, datetime.UTC)
        ),
    ),
}
OPERATORS = {
    EqualTo: lambda a, b: a == b,
    GreaterThan: lambda a, b: a > b,
    GreaterThanOrEqual: lambda a, b: a >= b,
    LessThan: lambda a, b: a < b,
    LessThanOrEqual: lambda a, b: a <= b,
}


def _literal_value(column: str, value):
    if column == "confirm_time":
        return round(value.timestamp() * 1_000_000)
    return value


@st.composite
def filters(draw):
    chosen = []
    for _ in range(draw(st.integers(1, 4))):
        column = draw(st.sampled_from(sorted(COLUMNS)))
        literals = COLUMNS[column][1]
        if draw(st.booleans()) and column != "confirm_time":
            chosen.append(In((column,), tuple(draw(st.lists(literals, min_size=1, max_size=4)))))
        else:
            operator = draw(st.sampled_from(sorted(OPERATORS, key=lambda o: o.__name__)))
            chosen.append(operator((column,), draw(literals)))
    return chosen


def _keeps(item, flt) -> bool:
    column = flt.attribute[0]
    value = COLUMNS[column][0](item)
    if value is None:  # NULL satisfies no comparison
        return False
    if isinstance(flt, In):
        return value in flt.value
    return OPERATORS[type(flt)](value, _literal_value(column, flt.value))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chosen=filters())
def test_pushed_filters_select_exactly_what_spark_would(journal, chosen):
    path, records = journal
    conditions = scan.Conditions()
    for flt in chosen:
        narrowed = push(conditions, flt)
        assert narrowed is not None, flt
        conditions = narrowed
    parts = scan.plan([(str(path), 1)], "pcj", conditions, records_per_partition=17, settle_s=0)
    seen = [values[scan.SEQ] for part in parts for _, values in scan.scan_values(part)]
    expected = [r.seq for r in records if all(_keeps(r, f) for f in chosen)]
    assert seen == expected


def test_unsupported_filters_are_left_to_spark():
    from pyspark.sql.datasource import IsNull, StringStartsWith

    conditions = scan.Conditions()
    assert push(conditions, StringStartsWith(("target",), "1.")) is None
    assert push(conditions, IsNull(("confirm_time",))) is None
    assert push(conditions, EqualTo(("body",), b"x")) is None
    assert push(conditions, EqualTo(("seq",), "12")) is None  # not an int: Spark filters
