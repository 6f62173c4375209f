#!/bin/bash
# Communicators across simulated nodes on a GPU machine (issue 25): torchrun processes through the NCCL shim, each
# told by CONCCL_HOSTID which simulated node it is on (tests/nccl/simulated_nodes.py), the real NCCL talking over
# loopback sockets. Checks the results of every collective (world: each one on fresh random data, --seed) and which
# library each communicator took:
#   world (every rank)      -> hierarchical with 2+ nodes of 2+ ranks (conccl in each node, NCCL rails), NCCL with
#                              one rank per node, conccl with one node
#   node groups             -> conccl
#   rail groups (across)    -> NCCL when 2+ nodes
#   pairs (local 0 and 1 of every node, 2+ ranks per node) -> hierarchical when 2+ nodes
# and, on a hierarchical world, that all_reduce, all_gather, reduce_scatter, broadcast and reduce each ran in phases
# on every rank at least once ("hierarchical, N steps" lines of the shim; all_to_all is reported, not required).
# for --mode split (ncclCommSplit of the world: the shim's split of an NCCL parent) and --mode new_group (a unique id
# and a rendezvous per group).
#
# Then PyTorch's training workloads on simulated nodes (tests/torch/workloads.py --sim-nodes G, layouts
# $WORKLOAD_LAYOUTS): DDP and FSDP2 on the world (hierarchical), HSDP (FSDP2 on a nodes x G mesh: shard inside a node
# on conccl, replicate across on the rails) and tensor parallelism inside each node, each against its one-process
# reference.
#
# Then a node that dies ($DEATH_LAYOUTS, default 2x2 3x2; tests/torch/fault_cases.py --mode kill --victim-node 1): every
# rank of simulated node 1 SIGKILLs itself while the others are inside a 64 MiB all_reduce on the hierarchical world
# (host) or waiting for a 1 MiB one on the GPU (gpu); every surviving rank's PyTorch must raise within DEATH_MAX_MS
# (default 1000) of the first kill, no process of the job, /dev/shm/conccl-* entry or GPU memory may be left.
# Run from the repository root on the GPU machine, with the shim staged (TARGETS=conccl_nccl_shim scripts/gpu-build.sh):
#   bash tests/nccl/run_simulated_nodes.sh           # $OUT/simulated-nodes/{summary.txt,*.log}
# Environment: SHIM (default gpu-stage/lib/libconccl_nccl.so), PY (/opt/torch/.venv/bin/python), NCCL_LIB (torch's
# NCCL), LAYOUTS (default "2x2 2x3 3x2"), LIMIT (seconds per run, 300), SEED (default: fresh per run, printed),
# HIER (CONCCL_NCCL_HIERARCHICAL for the run, default 1; with 0 the world goes to NCCL as a whole). --mode split runs
# with CONCCL_NCCL_HIER_CHUNKS=4 (pipelined AllReduce / AllGather / ReduceScatter checked), --mode new_group with 1
# (not pipelined). One GPU: every rank on GPU 0 and
# NCCL_HOSTID one per process (NCCL refuses two ranks of one host on one GPU); 2+ GPUs: rank's local index mod the
# GPU count and, when a node's ranks fit on distinct GPUs, NCCL_HOSTID = the simulated node (NCCL then uses P2P
# inside a node and sockets across).
set -u
cd "$(dirname "$0")/../.." || exit 1
SHIM="${SHIM:-$PWD/gpu-stage/lib/libconccl_nccl.so}"
PY="${PY:-/opt/torch/.venv/bin/python}"
NCCL_LIB="${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}"
LAYOUTS="${LAYOUTS-2x2 2x3 3x2}"  # empty: only the workloads
LIMIT="${LIMIT:-300}"
SEED="${SEED:-$(( (RANDOM << 15) | RANDOM ))}"
HIER="${HIER:-1}"
WORKLOAD_LAYOUTS="${WORKLOAD_LAYOUTS-2x2 3x2}"  # empty: none
WORKLOAD_CASES="${WORKLOAD_CASES:-ddp,fsdp2,hsdp,tp_in_node}"
DEATH_LAYOUTS="${DEATH_LAYOUTS-2x2 3x2}"  # empty: none
DEATH_MAX_MS="${DEATH_MAX_MS:-1000}"
out="${OUT:-/tmp/out}/simulated-nodes"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
[ -f "$SHIM" ] || { echo "FAIL: no shim at $SHIM" | tee -a "$summary"; exit 1; }
ngpus="$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
echo "GPUs: $ngpus, shim: $SHIM, real NCCL: $NCCL_LIB, seed $SEED, CONCCL_NCCL_HIERARCHICAL=$HIER" | tee -a "$summary"
[ "$ngpus" -ge 1 ] || { echo "FAIL: no GPU" | tee -a "$summary"; exit 1; }

count() { grep -c -- "$1" "$2" 2>/dev/null || true; }
failed=0
for layout in $LAYOUTS; do
  nodes="${layout%x*}"
  per="${layout#*x}"
  np=$((nodes * per))
  hostid=proc
  [ "$ngpus" -ge "$per" ] && [ "$ngpus" -ge 2 ] && hostid=node
  for mode in split new_group; do
    name="$layout-$mode"
    log="$out/$name.log"
    chunks=1; [ "$mode" = split ] && chunks=4
    timeout -k 10 "$LIMIT" env LD_PRELOAD="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" \
      LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
      NCCL_DEBUG=WARN CONCCL_DEBUG=INFO CONCCL_TIMEOUT_MS=60000 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
      CONCCL_NCCL_HIERARCHICAL="$HIER" CONCCL_NCCL_HIER_CHUNKS="$chunks" \
      "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" tests/nccl/simulated_nodes.py \
      --per-node "$per" --mode "$mode" --nccl-hostid "$hostid" --seed "$SEED" >"$log" 2>&1
    rc=$?
    # Distinct ranks that said ok (two ranks' lines can share one line of the log: their prints interleave).
    ok="$(grep -a -o 'simulated-nodes rank [0-9]*: ok' "$log" 2>/dev/null | sort -u | wc -l)"
    conccl="$(count 'conccl-shim: .* -> conccl (' "$log")"
    nccl="$(count 'conccl-shim: .* -> NCCL (' "$log")"
    hier="$(count 'conccl-shim: .* -> hierarchical (' "$log")"
    # Expected lines: world np (hierarchical with 2+ nodes of 2+ ranks, NCCL with one rank per node or HIER=0,
    # conccl with one node), node groups np (conccl), rail groups np (NCCL if nodes > 1; a rail of one node is a
    # one-rank communicator: conccl).
    want_hier=0
    if [ "$nodes" -gt 1 ]; then
      want_conccl=$np
      # pairs: 2 ranks of every node; hierarchical with the switch on, NCCL otherwise.
      pairs=0; [ "$per" -gt 1 ] && pairs=$((2 * nodes))
      if [ "$per" -gt 1 ] && [ "$HIER" = 1 ]; then want_hier=$((np + pairs)); want_nccl=$np
      else want_nccl=$((2 * np + pairs)); fi
    else
      want_nccl=0; want_conccl=$((3 * np))
    fi
    verdict=PASS
    why=""
    [ "$rc" -eq 0 ] || { verdict=FAIL; why="$why rc=$rc"; }
    [ "$ok" -eq "$np" ] || { verdict=FAIL; why="$why ok-ranks=$ok/$np"; }
    # At least the expected lines (torch may make further communicators, e.g. for a barrier); none unexpected on
    # the NCCL side for one node.
    [ "$conccl" -ge "$want_conccl" ] || { verdict=FAIL; why="$why conccl-comms=$conccl<$want_conccl"; }
    [ "$nccl" -ge "$want_nccl" ] || { verdict=FAIL; why="$why nccl-comms=$nccl<$want_nccl"; }
    [ "$nodes" -gt 1 ] || [ "$nccl" -eq 0 ] || { verdict=FAIL; why="$why nccl-comms=$nccl on one node"; }
    [ "$hier" -ge "$want_hier" ] || { verdict=FAIL; why="$why hierarchical-comms=$hier<$want_hier"; }
    if [ "$want_hier" -gt 0 ]; then
      # Each of these must have run in phases on every rank at least once (the shim says so once per communicator).
      # (torch calls ncclBcast or ncclBroadcast depending on its version.)
      for call in ncclAllReduce ncclAllGather ncclReduceScatter 'ncclB[a-z]*cast' ncclReduce; do
        ran="$(count "conccl-shim: $call: hierarchical, " "$log")"
        [ "$ran" -ge "$np" ] || { verdict=FAIL; why="$why $call-in-phases=$ran<$np"; }
      done
      if [ "$chunks" -gt 1 ]; then
        for call in ncclAllReduce ncclAllGather ncclReduceScatter; do
          ran="$(count "conccl-shim: $call: pipelined in " "$log")"
          [ "$ran" -ge "$np" ] || { verdict=FAIL; why="$why pipelined-$call=$ran<$np"; }
        done
      fi
      # torch builds without ncclAlltoAll run all_to_all_single as grouped send/recv (the flat communicator): noted.
      ran="$(count 'conccl-shim: ncclAlltoAll: hierarchical, ' "$log")"
      [ "$ran" -ge "$np" ] || why="$why (all_to_all not in phases: $ran ranks; torch's grouped send/recv?)"
    fi
    [ "$verdict" = PASS ] || failed=1
    echo "$verdict $name (np $np, NCCL_HOSTID per $hostid): hierarchical comms $hier, conccl comms $conccl, NCCL comms $nccl, ranks ok $ok$why" |
      tee -a "$summary"
  done
done
# Training workloads across simulated nodes.
for layout in $WORKLOAD_LAYOUTS; do
  nodes="${layout%x*}"
  per="${layout#*x}"
  np=$((nodes * per))
  log="$out/$layout-workloads.log"
  timeout -k 10 "$LIMIT" env LD_PRELOAD="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" \
    LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
    NCCL_DEBUG=WARN CONCCL_DEBUG=INFO CONCCL_TIMEOUT_MS=60000 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
    CONCCL_NCCL_HIERARCHICAL="$HIER" \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" tests/torch/workloads.py \
    --sim-nodes "$per" --cases "$WORKLOAD_CASES" >"$log" 2>&1
  rc=$?
  passed="$(grep -c '^CASE .* PASS' "$log" || true)"
  want="$(tr ',' '\n' <<<"$WORKLOAD_CASES" | grep -c .)"
  hier="$(count 'conccl-shim: .* -> hierarchical (' "$log")"
  verdict=PASS
  { [ "$rc" -eq 0 ] && [ "$passed" -eq "$want" ] && [ "$hier" -ge "$np" ]; } || { verdict=FAIL; failed=1; }
  echo "$verdict $layout-workloads (np $np): $passed of $want cases passed, rc=$rc, hierarchical comms $hier;" \
    "$(grep '^CASE' "$log" | cut -d' ' -f2-4 | tr '\n' ' ')" | tee -a "$summary"
done
# A node that dies: every rank of simulated node 1 kills itself; the survivors on the other nodes must raise.
for layout in $DEATH_LAYOUTS; do
  nodes="${layout%x*}"
  per="${layout#*x}"
  np=$((nodes * per))
  victims="$(seq -s, "$per" $((2 * per - 1)))"
  for where in host gpu; do
    name="$layout-node-dies-$where"
    d="$out/$name"
    rm -rf "$d" && mkdir -p "$d"
    find /dev/shm -maxdepth 1 -name 'conccl-*' 2>/dev/null | sort >"$d/shm-before"
    timeout -k 10 "$LIMIT" env LD_PRELOAD="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" \
      LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
      NCCL_DEBUG=WARN CONCCL_DEBUG=INFO CONCCL_TIMEOUT_MS=30000 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
      CONCCL_NCCL_HIERARCHICAL="$HIER" \
      "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" tests/torch/fault_cases.py \
      --sim-nodes "$per" --mode kill --where "$where" --victim-node 1 --result-dir "$d" --timeout-s 30 \
      >"$d.log" 2>&1
    rc=$?
    line="$("$PY" tests/torch/fault_cases.py --verdict kill --result-dir "$d" --world "$np" --where "$where" \
      --name "$name" --victims "$victims" --max-ms "$DEATH_MAX_MS" --shm-before "$d/shm-before" 2>&1 |
      grep -a '^CASE ' | tail -1)"
    for f in "$d"/pid-rank*.json; do  # what is left of the job, killed (the verdict has reported it)
      pid="$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$f" 2>/dev/null)"
      [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    done
    [ -n "$line" ] || line="CASE $name FAIL the verdict printed nothing"
    verdict="$(cut -d' ' -f3 <<<"$line")"
    [ "$verdict" = PASS ] || failed=1
    hier="$(count 'conccl-shim: .* -> hierarchical (' "$d.log")"
    echo "$verdict $name (np $np, victims $victims, job rc $rc, hierarchical comms $hier): ${line#CASE * * }" |
      cut -c1-600 | tee -a "$summary"
  done
done
# The lines that say why each communicator took its path, once per distinct reason.
grep -ho 'conccl-shim: nccl[A-Za-z]*[^:]*: comm [^ ]* rank [0-9]* nranks [0-9]* cudaDev [0-9-]* -> .*' "$out"/*.log |
  sed 's/comm 0x[0-9a-f]* rank [0-9]*/comm . rank ./; s/rendezvous [0-9.:]*/rendezvous ./' | sort | uniq -c >>"$summary"
# Which calls ran in phases and which went to the flat communicator (and why), once per distinct line.
grep -ho 'conccl-shim: nccl[A-Za-z]*: \(hierarchical, \|flat NCCL (\|pipelined in \).*' "$out"/*.log | sort | uniq -c >>"$summary"
# A rank's failures, if any.
grep -h 'simulated-nodes rank .*: FAIL' "$out"/*.log | head -40 >>"$summary"
exit $failed
