#!/bin/bash
# Interleave peerbench's bench_mrs.py under two or more interpreters (builds) and print
# the server's CPU per message for each run: the load-robust figure on a shared machine.
#   benchmarks/peer_cpu_compare.sh ROUNDS "BENCH ARGS" LABEL=PYTHON [LABEL=PYTHON ...]
#   benchmarks/peer_cpu_compare.sh 2 "confirms --producers 1 --window 1000" \
#       before=/path/to/old/.venv/bin/python after=.venv/bin/python
# A LABEL=PYTHON may be a wrapper script that sets MRS_WRITER=thread or PYTHONPATH first.
# PEERBENCH (default ../shared/peerbench) is where bench_mrs.py lives.
ROUNDS=$1; ARGS=$2; shift 2
HERE=$PWD
if [ -z "${PEERBENCH:-}" ]; then   # ../shared/peerbench beside the checkout (or a worktree's)
  for candidate in "$(dirname "$0")/../../shared/peerbench" "$(dirname "$0")/../../../shared/peerbench"; do
    [ -f "$candidate/bench_mrs.py" ] && PEERBENCH=$candidate && break
  done
fi
cd "${PEERBENCH:?no bench_mrs.py found: set PEERBENCH}" || exit 2
for r in $(seq $ROUNDS); do
  for lp in "$@"; do
    L=${lp%%=*}; PY=${lp#*=}
    case $PY in /*) ;; *) PY=$HERE/$PY ;; esac
    OUT=$($PY bench_mrs.py $ARGS --seconds 6 2>&1 | tail -1)
    python3 - "$L" "$OUT" <<'Q'
import sys,ast
label,line=sys.argv[1],sys.argv[2]
d=ast.literal_eval(line[line.index('{'):])
n=d.get('confirmed') or 0
cpu=d['server_user_s']+d['server_sys_s']
rate=d.get('e2e_per_s') or d.get('publish_confirmed_per_s')
extra = f" p50 {d.get('confirm_p50_ms')} p99 {d.get('confirm_p99_ms')} lat_p50 {d.get('lat_p50_ms')} lat_p99 {d.get('lat_p99_ms')}"
print(f"{label:8s} n={n:7d} rate={rate:9.1f} server_cpu={cpu:5.2f}s  us/msg={1e6*cpu/max(n,1):6.1f} commits/msg={d.get('server_commits_per_msg')} host={d.get('host_cpu_busy_pct')}{extra}", flush=True)
Q
  done
done
