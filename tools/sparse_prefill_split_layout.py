#!/usr/bin/env python3
"""CPU check of the index math of src/ops/sparse_attention/sparse_attention_prefill_split.cu (session 25 review).

Enumerates, with formulas independent of the kernel's own shortcuts:
1. copy_half: every (producer block, warp, lane, copy q, m4, half) -> the shared byte address it writes and the
   (key, dim) it copies; each (key, 8-dim chunk) of the half written exactly once, at 2 x cm_off(key, dim).
2. The wgmma operands read through the kernel's descriptors, with the PTX / CUTLASS canonical layouts
   (no swizzle: K-major ((8,m),(8,k)) : ((16 B, SBO), (2 B, LBO)); MN-major ((8,n),(8,k)) : ((2 B, SBO), (16 B, LBO));
   128-byte swizzle K-major: rows of 128 B, 8-row groups SBO apart, address bits [4:6] ^= bits [7:9]):
   - Q K^T: A = Q (head, dim) against where the TMA's 128-byte-swizzled boxes put (head, dim); B = the key block
     (key, dim) against cm_off;
   - P_own V_own (RS) and P_other V_other (SS): B = the key block read MN-major (dim = N, key = K); A = P from shared
     memory (head, key) against the P stores (pown[cm_off(row, key) / 2] = the fragment pair).
3. The softmax's key masks (the ballot shifted by 2 q4, bit kb) name key 8 jn + 2 q4 + (e & 1) of the block.
4. The epilogue's angle index tb + 4 nt = (d - rs) / 2 for every rope_dim (even, 0..512) and d >= rs, and that
   entry is one this warpgroup's fill wrote.
5. The online softmax as the two warpgroups run it (per 128-key step: each block's max, the exchanged max, P rounded
   to bf16 under it, each warpgroup's row sum of its own block, acc over both blocks; the epilogue's sum of both
   warpgroups' sums and f = em / (lt em + exp2(sink2 - mm))) against a direct softmax with the sink, over random
   key counts (0, tails, not multiples of 64), invalid keys (whole blocks, whole rows) and sinks.
Exit 1 on any mismatch."""
import math
import random
import struct
import sys

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def cm_off(r, c):  # elements
    return (((c >> 3) * 8 + (r >> 3)) * 8 + (r & 7)) * 8 + (c & 7)


kQBox, kBlockBytes, kHalfBytes, kPBytes = 64 * 128, 64 * 512 * 2, 64 * 512, 64 * 64 * 2
kOffQ, kOffK = 0, 8 * 64 * 128
kOffP = kOffK + 2 * kBlockBytes

# 1. copy_half
for pc in range(2):
    for h in range(2):
        seen = {}
        for pk_warp in (0, 32):  # kw0 = pk & 32
            for lane in range(32):
                sbase = kOffK + pc * kBlockBytes + 2 * ((32 * h + (lane & 3)) * 512 + (pk_warp >> 3) * 64 +
                                                        (lane >> 2) * 8)
                for q in range(4):
                    key = pk_warp + 8 * q + (lane >> 2)
                    for m4 in range(8):
                        addr = sbase + 2 * (2048 * m4) + 128 * q
                        dim = 256 * h + 32 * m4 + 8 * (lane & 3)  # `from` = row + kHalf h + 8 (lane & 3) + 32 m4
                        check(addr == kOffK + pc * kBlockBytes + 2 * cm_off(key, dim),
                              f"copy pc {pc} h {h} lane {lane} q {q} m4 {m4}")
                        check((key, dim) not in seen, f"copy twice {key} {dim}")
                        seen[(key, dim)] = addr
        check(len(seen) == 64 * 32, f"copy coverage pc {pc} h {h}: {len(seen)}")

# The TMA's placement of q (row = head in the item's 64, dim) in box dim // 64, 128-byte swizzle.
def tma_q_addr(head, dim):
    b, j = dim // 64, dim % 64
    return kOffQ + b * kQBox + head * 128 + ((((2 * j) >> 4) ^ (head & 7)) << 4) + ((2 * j) & 15)


def desc_fields(desc):
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4, desc >> 62)


def desc_nosw(addr, lbo, sbo):
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)


def desc_sw128(addr):
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)


def read_kmajor(desc, m, k):  # element (m, k) of a K-major bf16 operand of a k16 wgmma
    start, lbo, sbo, mode = desc_fields(desc)
    if mode == 0:
        return start + (m & 7) * 16 + (m >> 3) * sbo + (k & 7) * 2 + (k >> 3) * lbo
    assert mode == 1 and k < 16
    lin = start + (m & 7) * 128 + (m >> 3) * sbo + 2 * k
    return lin ^ (((lin >> 7) & 7) << 4)


def read_mnmajor(desc, n, k):  # element (n, k) of an MN-major bf16 operand, no swizzle
    start, lbo, sbo, mode = desc_fields(desc)
    assert mode == 0
    return start + (n & 7) * 2 + (n >> 3) * sbo + (k & 7) * 16 + (k >> 3) * lbo


sbase = 0  # the aligned shared base (its low 10 bits are 0; the addresses below are offsets from it)
for c in range(2):
    qa = sbase + kOffQ
    kown = sbase + kOffK + c * kBlockBytes
    koth = sbase + kOffK + (c ^ 1) * kBlockBytes
    # 2a. Q K^T over half hq of the own block (qk_half(dq_own, dk_own) hq = c; (dq_oth, dk_oth) hq = c ^ 1)
    for hq in (c, c ^ 1):
        da0 = desc_sw128(qa + hq * 4 * kQBox)
        db0 = desc_nosw(kown + hq * kHalfBytes, 1024, 128)
        for kk in range(16):
            da = da0 + ((((kk >> 2) * kQBox + (kk & 3) * 32)) >> 4)
            db = db0 + ((16 * kk * 128) >> 4)
            for k in range(16):
                dim = 256 * hq + 16 * kk + k
                for m in range(0, 64, 3):
                    check(read_kmajor(da, m, k) == tma_q_addr(m, dim), f"Q c {c} kk {kk} head {m} k {k}")
                for n in range(64):
                    check(read_kmajor(db, n, k) == kOffK + c * kBlockBytes + 2 * cm_off(n, dim),
                          f"K c {c} kk {kk} key {n} k {k}")
    # 2b. P V: B = block's half c read MN-major (n = dim 256 c + n, k = key 16 kk + k)
    for blk, base in ((c, kown), (c ^ 1, koth)):
        dv = desc_nosw(base + c * kHalfBytes, 128, 1024)
        for kk in range(4):
            d = dv + ((kk * 256) >> 4)
            for k in range(16):
                for n in range(0, 256, 5):
                    check(read_mnmajor(d, n, k) == kOffK + blk * kBlockBytes + 2 * cm_off(16 * kk + k, 256 * c + n),
                          f"V c {c} blk {blk} kk {kk} key {k} dim {n}")
    # 2c. P_other from shared memory: A K-major (m = head, k = key 16 kk + k) against the other warpgroup's stores
    stored = {}
    o = c ^ 1
    for warp in range(4):
        for lane in range(32):
            g, q4 = lane >> 2, lane & 3
            row0 = 16 * warp + g
            for kk in range(4):
                key = 16 * kk + 2 * q4
                # a[kk][0..3] = (row0, key), (row0 + 8, key), (row0, key + 8), (row0 + 8, key + 8), pairs (key, key+1)
                for (r, kc) in ((row0, key), (row0 + 8, key), (row0, key + 8), (row0 + 8, key + 8)):
                    word = cm_off(r, kc) // 2
                    check(cm_off(r, kc) % 2 == 0, "P store odd")
                    for e in range(2):
                        addr = kOffP + o * kPBytes + 4 * word + 2 * e
                        check(addr not in stored, "P stored twice")
                        stored[addr] = (r, kc + e)
    check(len(stored) == 64 * 64, "P coverage")
    dp = desc_nosw(sbase + kOffP + o * kPBytes, 1024, 128)
    for kk in range(4):
        d = dp + ((kk * 2048) >> 4)
        for m in range(64):
            for k in range(16):
                check(stored.get(read_kmajor(d, m, k)) == (m, 16 * kk + k), f"P c {c} kk {kk} head {m} key {k}")

# 3. key masks
for q4 in range(4):
    for jn in range(8):
        for e in range(4):
            key = 8 * jn + 2 * q4 + (e & 1)
            kb = 8 * (jn & 3) + (e & 1)
            word, bit = (0, key) if jn < 4 else (1, key - 32)
            check(word == (0 if jn < 4 else 1) and kb + 2 * q4 == bit, f"mask q4 {q4} jn {jn} e {e}")

# 4. the epilogue's angle index
for rope_dim in range(0, 513, 2):
    rs = 512 - rope_dim
    filled = {0: set(), 1: set()}
    for c in range(2):
        for j in range(rope_dim // 2):  # attn_rope::fill with [256 c, 256 c + 256)
            d = rs + 2 * j
            if 256 * c <= d < 256 * (c + 1):
                filled[c].add(j)
    for c in range(2):
        for q4 in range(4):
            d0 = 256 * c + 2 * q4
            tb = int((d0 - rs) / 2)  # C++ division truncates toward zero
            for nt in range(32):
                d = d0 + 8 * nt
                if d >= rs:
                    idx = tb + 4 * nt
                    check(idx == (d - rs) // 2 and idx in filled[c], f"rope {rope_dim} c {c} q4 {q4} nt {nt}")

# 5. the online softmax (scalar emulation, one head, a few value dims)
def bf16(x):  # round to nearest even
    if x == 0.0 or math.isinf(x):
        return x
    b = struct.unpack('<I', struct.pack('<f', x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack('<f', struct.pack('<I', b))[0]


def exp2(x):
    return 0.0 if x == -math.inf else 2.0 ** x


rnd = random.Random(7)
LOG2E = 1.4426950408889634
for trial in range(3000):
    nk = rnd.choice([0, 1, 5, 63, 64, 65, 100, 127, 128, 129, 200, 256, 300])
    scale = 1 / math.sqrt(512)
    raw = [rnd.gauss(0, 30) for _ in range(nk)]
    valid = [rnd.random() > (0.0 if trial % 3 == 0 else 0.3) for _ in range(nk)]
    if trial % 7 == 0:
        valid = [False] * nk  # every key invalid
    if trial % 5 == 0 and nk > 64:
        for k in range(64, min(128, nk)):
            valid[k] = False  # a whole second block invalid
    vals = [rnd.gauss(0, 1) for _ in range(nk)]
    sink = rnd.gauss(0, 3) if trial % 11 else 40.0
    nsteps = (nk + 127) // 128
    m = -math.inf
    l = [0.0, 0.0]
    acc = 0.0
    for j in range(nsteps):
        sc = [[], []]
        for c in range(2):
            for i in range(64):
                k = 128 * j + 64 * c + i
                ok = k < nk and valid[k]
                sc[c].append(raw[k] * scale * LOG2E if ok else -math.inf)
        mx = [max(sc[0]), max(sc[1])]
        mnew = max(m, mx[0], mx[1])
        alpha = exp2(m - mnew) if mnew != -math.inf else 1.0
        p = [[bf16(exp2(x - mnew)) if mnew != -math.inf else 0.0 for x in sc[c]] for c in range(2)]
        for c in range(2):
            l[c] = l[c] * alpha + sum(p[c])
        acc = acc * alpha
        for c in range(2):
            for i in range(64):
                k = 128 * j + 64 * c + i
                acc += p[c][i] * (vals[k] if k < nk else 0.0)
        m = mnew
    lt = l[0] + l[1]
    sink2 = sink * LOG2E
    mm = max(m, sink2)
    em = exp2(m - mm)
    f = em / (lt * em + exp2(sink2 - mm))
    got = acc * f
    # direct: softmax over the valid keys and the sink (natural log units)
    ss = [raw[k] * scale for k in range(nk) if valid[k]]
    vv = [vals[k] for k in range(nk) if valid[k]]
    M = max(ss + [sink])
    den = sum(math.exp(x - M) for x in ss) + math.exp(sink - M)
    want = sum(math.exp(x - M) * v for x, v in zip(ss, vv)) / den
    check(math.isfinite(got) and abs(got - want) <= 1e-2 * (abs(want) + 1e-3 + max([abs(v) for v in vv] + [0]) * 0.1),
          f"softmax trial {trial} nk {nk}: {got} vs {want}")
    if not any(valid):
        check(got == 0.0, f"softmax trial {trial}: no valid key gives {got}")

print(f"layout checks: {len(errors)} mismatches")
for e in errors[:10]:
    print("  ", e)
sys.exit(1 if errors else 0)
