#!/usr/bin/env python3
"""Sends SIGUSR2 to every thread of every process whose command line contains PATTERN (scripts/bt_on_signal.c,
LD_PRELOADed into them, prints that thread's native backtrace on its stderr). Diagnostic only."""
import ctypes, os, signal, sys, time
pattern = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
SYS_tgkill = 234  # x86_64
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if pattern not in cmd or "dump_threads" in cmd:
        continue
    tids = os.listdir(f"/proc/{pid}/task")
    print(f"pid {pid}: {len(tids)} threads: {cmd[:120]}", flush=True)
    for tid in tids:
        libc.syscall(SYS_tgkill, int(pid), int(tid), signal.SIGUSR2)
        time.sleep(0.02)
