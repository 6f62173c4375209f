"""A foreign process that races a job's ranks to conccl's bootstrap (issue 24 item 6, case 6c).

conccl's multi-process bootstrap (src/core/bootstrap.{h,cc}) is an abstract Unix socket, "@conccl-boot-<32 hex>",
bound by rank 0 while the communicator initialises; the other ranks connect and send a hello (a 32-byte header:
u32 magic "CCB1", u32 type 1, i32 rank, i32 nranks, i64 pid, u64 length, then the payload). Abstract sockets are
listed in /proc/net/unix, so any process of the node can find and connect to one.

This helper polls /proc/net/unix every --poll-ms for abstract names containing "conccl", connects once to each new
one (a name that refuses, bound but not yet listening, is tried again at every poll while it is listed) and claims to be the last rank (--nranks - 1) of --nranks: if rank 0 opens with a challenge (the authenticated
bootstrap, wire magic "CCB2", type 6) it answers with a proof made without the secret (its own random challenge and
32 random bytes for the MAC), then a hello; otherwise (the older protocol, "CCB1") it sends the hello at once. It
keeps the connection open and records everything it receives until --duration-s has passed. It learned something
if it received any message other than an error (type 3) or a challenge: a table of every rank's hello (type 2), an
all-gather result (type 5), a root proof (type 8), or bytes that do not parse.

A connection the job closes while the helper speaks (a refusal) counts as raced, with what arrived before.

Exit status: 0 = it raced at least one bootstrap socket and learned nothing; 1 = it learned something; 2 = it never
connected to a conccl bootstrap socket (the test could not race the job: inconclusive, counted as a failure by the
runner). The job
itself must still pass (fault_cases.py --mode intruder-job); tests/torch/run_all.sh checks both.
"""
import argparse
import json
import os
import select
import socket
import struct
import sys
import time

WIRE_MAGIC = 0x31424343  # "CCB1"
WIRE_MAGICS = {WIRE_MAGIC: "CCB1", 0x32424343: "CCB2"}  # CCB2: the bootstrap that authenticates (challenge first)
HEADER = struct.Struct("<IIiiqQ")
TYPES = {1: "hello", 2: "table", 3: "error", 4: "gather", 5: "gathered", 6: "challenge", 7: "proof",
         8: "root-proof"}


def abstract_names(match):
    names = set()
    try:
        with open("/proc/net/unix") as f:
            next(f, None)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[7].startswith("@") and "conccl" in parts[7] and match in parts[7]:
                    names.add(parts[7][1:])
    except OSError:
        pass
    return names


def parse(buf):
    msgs, off = [], 0
    while len(buf) - off >= HEADER.size:
        magic, typ, rank, nranks, pid, length = HEADER.unpack_from(buf, off)
        if magic not in WIRE_MAGICS:
            msgs.append({"type": "unparsed", "bytes": len(buf) - off})
            return msgs
        body = buf[off + HEADER.size: off + HEADER.size + length]
        msgs.append({"type": TYPES.get(typ, str(typ)), "rank": rank, "nranks": nranks, "pid": pid,
                     "length": length, "received": len(body),
                     "text": body[4:200].decode(errors="replace") if typ == 3 else None})
        off += HEADER.size + length
    if off < len(buf):
        msgs.append({"type": "partial", "bytes": len(buf) - off})
    return msgs


def race(name, args):
    """Connects to @name and plays the last rank (module docstring). Returns ("refused", None) when nothing listens on
    it yet (bound but not listening: the listener's own race, tried again at the next poll), ("failed", error) when
    the connection could not be made otherwise, and ("connected", (sock, buf, how)) once connected: an error after the
    connection (the job closing it) still counts, with what was received until then."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect("\0" + name)
    except ConnectionRefusedError:
        s.close()
        return "refused", None
    except OSError as e:
        s.close()
        return "failed", str(e)
    buf = bytearray()
    how = "connected"
    try:
        # The authenticated bootstrap speaks first (a challenge); the older one waits for the hello.
        s.settimeout(args.challenge_wait_s)
        try:
            while len(buf) < HEADER.size:
                chunk = s.recv(HEADER.size - len(buf))
                if not chunk:
                    break
                buf.extend(chunk)
        except socket.timeout:
            pass
        rank, n, me = args.nranks - 1, args.nranks, os.getpid()
        payload = bytes(args.payload_bytes)
        if len(buf) == HEADER.size:
            magic, typ, _, _, _, length = HEADER.unpack(bytes(buf))
            s.settimeout(0.5)
            body = b""
            while len(body) < min(length, 1 << 16):
                chunk = s.recv(min(length, 1 << 16) - len(body))
                if not chunk:
                    break
                body += chunk
            buf.extend(body)
            how = f"answered a {TYPES.get(typ, typ)} ({WIRE_MAGICS.get(magic, hex(magic))}) with a wrong proof"
            fake = os.urandom(64)  # our challenge c1 and a MAC made without the secret
            s.sendall(HEADER.pack(magic, 7, rank, n, me, len(fake)) + fake)
            s.sendall(HEADER.pack(magic, 1, rank, n, me, len(payload)) + payload)
        else:
            how = "sent a hello (no challenge came)"
            s.sendall(HEADER.pack(WIRE_MAGIC, 1, rank, n, me, len(payload)) + payload)
        s.setblocking(False)
    except OSError as e:
        # Closed by the job while we spoke (a refusal): nothing more to read, but what came before counts.
        how += f"; then the job closed the connection ({e}) after {len(buf)} bytes"
        s.close()
    return "connected", (s, buf, how)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nranks", type=int, required=True, help="the job's world size; the hello claims rank nranks-1")
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--poll-ms", type=float, default=1.0)
    p.add_argument("--payload-bytes", type=int, default=256, help="size of the (zero) payload of the fake hello")
    p.add_argument("--out", help="JSON report")
    p.add_argument("--ready-file", help="touched once polling has started")
    p.add_argument("--challenge-wait-s", type=float, default=0.3,
                   help="how long to wait for rank 0's challenge before sending the older protocol's hello")
    p.add_argument("--stop-file", help="stop early (before --duration-s) once this file exists")
    p.add_argument("--match", default="conccl",
                   help="race only sockets whose name also contains this (the CPU tests race only their own)")
    args = p.parse_args()

    # raced: names connected to (or that failed otherwise), never tried again; refusals: names that refused, tried
    # again at every poll while they are listed.
    seen, raced, refusals, conns = set(), set(), {}, {}
    report = {"connected": [], "failed": [], "received": {}}
    end = time.time() + args.duration_s
    if args.ready_file:
        open(args.ready_file, "w").close()
    while time.time() < end and not (args.stop_file and os.path.exists(args.stop_file)):
        names = abstract_names(args.match)
        seen |= names
        for name in sorted(names - raced):
            outcome, result = race(name, args)
            if outcome == "refused":
                refusals[name] = refusals.get(name, 0) + 1
                continue
            raced.add(name)
            if outcome == "failed":
                report["failed"].append({"name": name, "error": result})
                continue
            s, buf, how = result
            conns[name] = (s, buf)
            report["connected"].append({"name": name, "t": time.time(), "how": how,
                                        "refused_before": refusals.get(name, 0)})
            print(f"intruder: connected to @{name} claiming rank {args.nranks - 1} of {args.nranks}: {how}",
                  flush=True)
        live = [s for s, _ in conns.values() if s.fileno() >= 0]
        if live:
            r, _, _ = select.select(live, [], [], args.poll_ms / 1e3)
            for name, (s, buf) in conns.items():
                if s in r:
                    try:
                        chunk = s.recv(1 << 20)
                    except OSError:
                        chunk = b""
                    if chunk:
                        buf.extend(chunk)
                    else:
                        s.close()  # closed by the other end
        else:
            time.sleep(args.poll_ms / 1e3)
    for name, count in refusals.items():
        if name not in raced:
            report["failed"].append({"name": name, "error": f"refused on each of {count} tries (never listening)"})
    learned = []
    for name, (s, buf) in conns.items():
        msgs = parse(bytes(buf))
        report["received"][name] = {"bytes": len(buf), "messages": msgs}
        bad = [m for m in msgs if m["type"] not in ("error", "challenge")]  # a challenge is 32 random bytes
        if bad:
            learned.append(f"@{name}: {len(buf)} bytes, messages {[m['type'] for m in msgs]}")
        if s.fileno() >= 0:
            s.close()
    report["seen"] = sorted(seen)
    report["learned"] = learned
    # Raced means a bootstrap socket: the VMM handle servers ("conccl-vmm-<pid>") are connected to as well (they must
    # not answer a stranger either), but a connection to one does not make the case conclusive.
    raced_boot = [c for c in report["connected"] if c["name"].startswith("conccl-boot-")]
    status = 1 if learned else (0 if raced_boot else 2)
    report["status"] = {0: "raced the bootstrap, learned nothing", 1: "LEARNED something",
                        2: "never connected to a conccl bootstrap socket (inconclusive)"}[status]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print(f"intruder: {report['status']}; sockets seen {len(seen)}, connected {len(report['connected'])}"
          + (f"; learned: {learned}" if learned else ""), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
