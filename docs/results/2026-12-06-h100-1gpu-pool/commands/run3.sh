#!/usr/bin/env bash
# Run 3 (2026-12-06, session 50), stage 0e60584 (the graph memory lookup reads node types through the driver, and the
# test allocates the AllGather's output after a captured call): run 2's commands again, unchanged.
exec bash "$(dirname "${BASH_SOURCE[0]}")/run2.sh"
