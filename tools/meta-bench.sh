#!/usr/bin/env bash
# tools/meta-bench.sh (docs/performance.md, "Metadata on PostgreSQL"). Small-file creates through the CLI on a SQLite and a PostgreSQL cluster: time of
# `nasd cp -r` of N 1 KiB files, and the manager's CPU time (utime+stime) over it.
set -euo pipefail
NASD=${NASD:-target/debug/nasd}
N=${N:-1000}
root=$(mktemp -d); chmod 711 "$root"
src=$root/src; mkdir "$src"
for i in $(seq 1 $N); do head -c 1024 /dev/urandom > "$src/f$i"; done
tick=$(getconf CLK_TCK)
for meta in sqlite postgres; do
  data=$root/$meta
  HOME=$root "$NASD" up --background --drives 2 --meta $meta --data "$data" >/dev/null
  export NASD_CONFIG=$data/client.json
  mpid=$(python3 -c "import json;print([p[1] for p in json.load(open('$data/pids.json'))['pids'] if p[0]=='manager'][0])")
  cpu() { awk '{print $14+$15}' /proc/$mpid/stat; }
  "$NASD" mkdir nasd:/warm >/dev/null
  for run in 1 2; do
    c0=$(cpu); t0=$(date +%s.%N)
    "$NASD" cp -r "$src" nasd:/run$run >/dev/null
    t1=$(date +%s.%N); c1=$(cpu)
    python3 -c "
n=$N; wall=$t1-$t0; cpu=($c1-$c0)/$tick
print(f'$meta run $run: {n} files in {wall:.2f} s = {n/wall:.0f} creates/s; manager CPU {cpu:.2f} s = {cpu/n*1e6:.0f} us/file')"
  done
  c0=$(cpu); t0=$(date +%s.%N)
  for i in $(seq 1 20); do "$NASD" ls nasd:/run1 >/dev/null; done
  t1=$(date +%s.%N); c1=$(cpu)
  python3 -c "print(f'$meta ls of $N entries: {($t1-$t0)/20*1000:.0f} ms each; manager CPU {($c1-$c0)/$tick/20*1000:.0f} ms each')"
  HOME=$root "$NASD" down --data "$data" >/dev/null
  unset NASD_CONFIG
done
rm -rf "$root"
