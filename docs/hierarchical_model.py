"""The cost model of docs/hierarchical.md: NCCL alone vs a hierarchical path (intra-node phases on conccl's copy engines,
inter-node phase on NCCL over the rail) for 2-64 nodes of 8 H200. A model, not a measurement: every input is listed
in INPUTS with where it comes from. Prints the tables the page quotes: `python3 docs/hierarchical_model.py`.

Times in microseconds; sizes in bytes; bandwidths in GB/s (1 GB/s = 1e3 bytes per microsecond).
"""
import math

G = 8  # GPUs per node
INPUTS = {
    # Network, per GPU (one 400 Gb/s NIC each). NVIDIA: "For NDR @ 400Gbps you should see 46-48GB/s per NIC"
    # (nccl-tests issue 290). NCCL's ring busbw across 3+ nodes is what goes through the NICs (nccl-tests issue 160).
    "b_net": 46.0,
    # Copy-engine movement inside a node, per GPU, all peers at once. Measured on 2 H200: one peer copy 370-396 GB/s,
    # conccl all_gather busbw 346 GB/s at 1 GB (docs/results/2026-11-30-h200-x2-sweep-peer-reduce-c3). 8 GPUs: not
    # measured; NCCL's effective NVLink figure on 8 H100 is 370 GB/s (nccl-tests issue 212). Model: 350.
    "b_ce": 350.0,
    # Fixed cost of one copy-engine phase on 8 GPUs: 7 peer copies at ~4.3 us of issue each (FACTS.md, launch costs)
    # plus the ready/done handshakes; the 2-GPU 1 MiB all_gather took ~40 us (same results folder). Model: 30 us.
    "a_ce": 30.0,
    # Pieces the pipelined hierarchical path cuts a call into (each phase of piece i overlaps the others' pieces).
    "pieces": 8,
}
# NCCL's own latency model (NVIDIA/nccl src/graph/tuning.cc, the Hopper-era table: base latency per algorithm and
# protocol, per-step latency per link kind), the numbers NCCL itself uses to pick an algorithm and protocol.
BASE = {("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
        ("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 0.0}
NVL = {("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
       ("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 28.0}
NET = {("ring", "LL"): 2.7, ("ring", "LL128"): 4.0, ("ring", "Simple"): 14.0,
       ("tree", "LL"): 5.0, ("tree", "LL128"): 8.5, ("tree", "Simple"): 28.0}
NET_OVERHEAD = {"LL": 1.0, "LL128": 1.0, "Simple": 3.0}  # per inter-node ring step, us (x86, Intel)
LL_MAX_BW = 20.4  # GB/s, NCCL's LL cap across 3+ nodes (same file)


def lg(n):
    return math.log2(n) if n > 1 else 0.0


def proto_bw(bus, proto, algo):
    if proto == "LL":
        return min(bus / (4.0 if algo == "ring" else 3.8), LL_MAX_BW)
    if proto == "LL128":
        return bus * (0.92 if algo == "ring" else 120.0 / 128.0)
    return bus if algo == "ring" else bus * 0.92


def nccl_time(coll, nranks, nnodes, nbytes, bus):
    """NCCL's best algorithm/protocol for `coll` (AR: ring or tree; AG/RS: ring), as its model predicts."""
    best = float("inf")
    for algo in ("ring", "tree"):
        if coll != "AR" and algo == "tree":
            continue
        for proto in ("LL", "LL128", "Simple"):
            bw = proto_bw(bus, proto, algo)
            if algo == "ring":
                steps = 2 * (nranks - 1) if coll == "AR" else nranks - 1
                inter = (2 * nnodes if coll == "AR" else nnodes - 1) if nnodes > 1 else 0
                intra_lat = max(NVL[(algo, proto)], NET_OVERHEAD[proto] if nnodes > 1 else 0.0)
                lat = BASE[(algo, proto)] + (steps - inter) * intra_lat + inter * NET[(algo, proto)]
                t = lat + nbytes * steps / nranks / (bw * 1e3)
            else:
                ppn = nranks // nnodes
                lat = BASE[(algo, proto)] + 2 * ((ppn - 1) * NVL[(algo, proto)] + lg(nnodes) * NET[(algo, proto)])
                t = lat + 2 * nbytes / (bw * 1e3)  # NCCL's tree algorithm bandwidth is busbw / 2
            best = min(best, t)
    return best


def rail_time(coll, nnodes, nbytes):
    """NCCL on the rail: one GPU per node, the node's share of the buffer. AG/RS may use PAT (logarithmic, NCCL
    2.23+, one GPU per node only), modelled as log2(N) network steps."""
    if nnodes == 1:
        return 0.0
    t = nccl_time(coll, nnodes, nnodes, nbytes, INPUTS["b_net"])
    if coll != "AR":
        pat = BASE[("ring", "Simple")] + math.ceil(lg(nnodes)) * NET[("ring", "Simple")] + \
            nbytes * (nnodes - 1) / nnodes / (INPUTS["b_net"] * 1e3)
        t = min(t, pat)
    return t


def ce_phase(nbytes):
    """One copy-engine phase inside a node (ReduceScatter or AllGather of a buffer of nbytes per rank)."""
    return INPUTS["a_ce"] + nbytes * (G - 1) / G / (INPUTS["b_ce"] * 1e3)


def overlap(a, b):
    """Two dependent phases over K pieces: sequential, or pipelined (the longer phase, plus one piece of the
    shorter to fill, plus a per-piece issue cost); whichever is shorter."""
    k = INPUTS["pieces"]
    return min(a + b, max(a, b) + min(a, b) / k + k * INPUTS["a_ce"] / 2)


def hier_time(coll, nnodes, nbytes):
    if coll == "AR":  # RS in the node, AR on the rail (1/G of the buffer), AG in the node
        return overlap(2 * ce_phase(nbytes), rail_time("AR", nnodes, nbytes / G))
    # AG: AG on the rail (the node's 1/G), then AG in the node; RS: the mirror image, same cost
    return overlap(ce_phase(nbytes), rail_time("AG", nnodes, nbytes / G))


def table(coll):
    nodes = [2, 4, 8, 16, 32, 64]
    print(f"\n{coll}: NCCL alone / hierarchical (us), speed-up = NCCL / hierarchical")
    print("| size per rank | " + " | ".join(f"{n} nodes" for n in nodes) + " |")
    print("|---:|" + "---:|" * len(nodes))
    for size in [64 << 10, 1 << 20, 8 << 20, 64 << 20, 256 << 20, 1 << 30]:
        cells = []
        for n in nodes:
            t = nccl_time(coll, G * n, n, size, G * INPUTS["b_net"])
            h = hier_time(coll, n, size)
            cells.append(f"{t:.0f} / {h:.0f} = **{t / h:.2f}**" if t / h >= 1.1 else f"{t:.0f} / {h:.0f} = {t / h:.2f}")
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    print("inputs:", INPUTS)
    table("AR")
    table("AG")
