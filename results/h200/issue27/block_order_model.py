#!/usr/bin/env python3
"""The launch-order model behind backward step 11 (docs/tuning_flash_wgmma.md): list scheduling
of cuda.flash_bwd_wgmma's blocks, in launch order, on 132 SMs with one block each. A block's time
is its query tiles plus 2 (prologue and epilogue). Printed: the makespan over the perfect split
for three orders: the old one (key block fastest, pair by pair), longest first over every pair,
and block_coords' grouped order. The FA3 grid's shapes (16k tokens). --fwd: the same for
cuda.flash_fwd_wgmma's causal grid (decode's grouped order, step 9 of the forward).

    python3 results/h200/issue27/block_order_model.py [--fwd]
"""
import heapq

SMS = 132


def makespan(durations):
    free = [0.0] * SMS
    for d in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + d)
    return max(free)


def orders(seq, pairs, bm, bn, causal, overhead=2.0):
    kv_blocks, m_tiles = (seq + bn - 1) // bn, (seq + bm - 1) // bm

    def dur(n):
        return m_tiles - (n * bn // bm if causal else 0) + overhead

    old = [dur(n) for _ in range(pairs) for n in range(kv_blocks)]
    longest = [dur(n) for n in range(kv_blocks) for _ in range(pairs)]
    group = max(1, min(pairs, SMS // kv_blocks))
    grouped = [dur(n) for g in range(0, pairs, group) for n in range(kv_blocks)
               for _ in range(g, min(pairs, g + group))]
    ideal = sum(old) / SMS
    return [makespan(o) / ideal for o in (old, longest, grouped)]


def fwd_orders(seq, pairs, bm, bn, overhead=1.0):
    """cuda.flash_fwd_wgmma's causal grid: query block m (longest first within a pair) visits
    ceil((m + 1) bm / bn) key tiles. The old order (a pair's blocks together) against decode's
    grouped one."""
    m_blocks = (seq + bm - 1) // bm

    def dur(i):
        m = m_blocks - 1 - i
        return ((m + 1) * bm + bn - 1) // bn + overhead

    old = [dur(i) for _ in range(pairs) for i in range(m_blocks)]
    group = max(1, min(pairs, SMS // m_blocks))
    grouped = [dur(i) for g in range(0, pairs, group) for i in range(m_blocks)
               for _ in range(g, min(pairs, g + group))]
    ideal = sum(old) / SMS
    return [makespan(o) / ideal for o in (old, grouped)]


if __name__ == "__main__":
    import sys
    if "--fwd" in sys.argv[1:]:
        tiles = {64: (128, 128, 32), 128: (128, 128, 16), 256: (128, 80, 8)}  # causal tiles
        print("forward, causal: head_dim seq | old grouped")
        for d, (bm, bn, heads) in tiles.items():
            for seq in (2048, 4096, 8192, 16384):
                r = fwd_orders(seq, heads * (16384 // seq), bm, bn)
                print(f"d{d} {seq} | " + " ".join(f"{x:.3f}" for x in r))
        sys.exit(0)
    tiles = {64: (128, 128, 32), 128: (64, 128, 16), 256: (64, 64, 8)}  # bm, bn, heads
    print("head_dim seq causal | old longest-first grouped")
    for d, (bm, bn, heads) in tiles.items():
        for seq in (2048, 4096, 8192, 16384):
            for causal in (False, True):
                r = orders(seq, heads * (16384 // seq), bm, bn, causal)
                print(f"d{d} {seq} {'causal' if causal else 'dense '} | "
                      + " ".join(f"{x:.3f}" for x in r))
