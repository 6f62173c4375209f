#!/usr/bin/env bash
# The first call of a session, whatever card comes: on an H200 the skew case beside plain NCCL (skew.sh, ~255 s: the
#   host-time figures issue 24's "done when" names, first because failed starts may leave too little time for the
#   whole set); on an H100 nothing, since every H100 question is answered (README.md), so that the start costs only
#   itself. The device tool names the card only once the call runs, so the choice is made here.
here="$(dirname "$0")"
if nvidia-smi -L | head -1 | grep -q H200; then
  exec bash "$here/../../results/2026-12-06-h100-1gpu-whole/commands/skew.sh"
fi
echo "not an H200: $(nvidia-smi -L | head -1 | cut -c1-40); nothing run"
