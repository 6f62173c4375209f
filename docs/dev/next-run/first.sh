#!/usr/bin/env bash
# The first call of a session, whatever card comes: on an H200 the whole set's first call (call-order.sh 1 3, ~300 s),
#   on an H100 the call that set is no use there for (late-peers-laps.sh, ~200 s). The device tool names the card only
#   once the call runs, so the choice is made here.
here="$(dirname "$0")"
if nvidia-smi -L | head -1 | grep -q H200; then
  exec bash "$here/../../results/2026-12-07-h100-1gpu-verify/commands/call-order.sh" 1 3
fi
exec bash "$here/late-peers-laps.sh"
