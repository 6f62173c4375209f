#!/usr/bin/env bash
# Call 3 (call 2 was the same, before the node lookup used the driver's node types): the launch-forms probe alone.
#   Built here with: nvcc -O2 -std=c++20 -gencode arch=compute_90,code=sm_90 -o probe-stage/launch_forms \
#   commands/launch_forms.cu -lcuda (CUDA 13.0); carried as probe-stage/.
probe-stage/launch_forms 21 3 2>&1 | tail -45
