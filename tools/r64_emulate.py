#!/usr/bin/env python3
"""CPU emulation of the kRoles64 FP8 sparse decode kernel's index math and block protocol
(src/ops/sparse_attention/sparse_attention_fp8_r64.cu; session 25 review, no GPU). Each check compares the kernel's
formula, transcribed here, with an independent one:

1. wgmma operands: for every wgmma the kernel issues (Q K^T: m64n64k16, A = Q, B = the key tile, both K-major; P V:
   m64n256k16, A = P K-major, B = the key tile MN-major), the shared-memory address of each (row, k) element under
   the PTX ISA canonical no-swizzle layouts and the kernel's descriptor (base, LBO, SBO) against where the kernel's
   writers put that element (t_off = attn_wgmma::q_off).
2. The producer: every (key row, dim) of a 64 x 512 key tile written exactly once a tile, by 16-byte aligned
   stores; each 16-dim code chunk from the row bytes and the UE8M0 scale byte main's warp-specialised kernel reads
   (chunk ch: bytes 16 ch, scale byte ch / 4; RoPE chunk c: dims 448 + 8 (c - 28)); the L2 prefetch's quarters cover
   the 576 data bytes; the ballot mask's bits name the keys whose rows were stored.
3. load_q: the 4,096 16-byte chunks of Q, each (head, 8-dim group) once.
4. split_of (32-bit) against attn_split_range (int64, split_keys 0, tile 64): the same ranges; the splits cover
   each token's keys once.
5. item_at (persistent) against the grid's (t, group, split) numbering.
6. The block protocol (mbarriers full / empty with their parities, named barriers Q / PReady / PFree / Final),
   the three warpgroups as agents under random schedules, over several items (the persistent loop; tiles 0 .. 5
   an item, empty items included): no deadlock, every barrier generation completed by its intended participants,
   every read of a shared-memory region (key slot, mask, P, alpha, max / sum, Q) sees the version it expects, and no
   write lands on a region while an asynchronous wgmma read of it is in flight.
7. The online softmax as transcribed (softmax64's max before the scale, ex2 form, bf16 p, alpha, masked and missing
   keys, tails), the rescale and P V, write_rows's sink normalisation (one split) and the combine (split partials
   from split_of's ranges): against a float64 softmax with the sink, 300 random cases (0 .. 200 keys, 1 .. 9 splits,
   all keys invalid included: output 0), within bf16 p's rounding.
Usage: python3 tools/r64_emulate.py (exit 1 on any failure; mutating a barrier or a parity makes section 6 fail).
"""
import random
import sys

FAIL = []


def check(cond, msg):
    if not cond:
        FAIL.append(msg)
        if len(FAIL) < 20:
            print("FAIL:", msg)


# ---------------------------------------------------------------- 1. wgmma operands vs the writers' layout
def q_off(h, d):  # attn_wgmma::q_off, elements (bf16)
    return ((((d >> 3) * 8 + (h >> 3)) * 8 + (h & 7)) * 8) + (d & 7)


T = 8  # bf16 elements in 16 bytes


def kmajor(mn, k, lbo, sbo):  # PTX canonical K-major, no swizzle: ((8,m),(T,2k)):((1T,SBO),(1,LBO)), bytes
    return 2 * ((mn % 8) * T + k % T) + (mn // 8) * sbo + (k // T) * lbo


def mnmajor(mn, k, lbo, sbo):  # PTX canonical MN-major, no swizzle: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)), bytes
    return 2 * ((mn % T) + (k % 8) * T) + (mn // T) * sbo + (k // 8) * lbo


def desc_roundtrip(addr, lbo, sbo):  # sm90::wgmma_desc's fields, decoded
    d = ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)
    return (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4, d >> 62


kTile = 64 * 512 * 2
kOffQ, kOffK = 0, 64 * 512 * 2
kOffP = kOffK + 2 * kTile
base_smem = 0x400  # any 1024-aligned shared window address
for slot in range(2):
    ks = base_smem + kOffK + slot * kTile
    qs = base_smem + kOffQ
    for kk in range(32):  # Q K^T, s = Q K^T over dims 16 kk ..
        a, lbo_a, sbo_a, sw_a = desc_roundtrip(qs + kk * 2048, 1024, 128)
        b, lbo_b, sbo_b, sw_b = desc_roundtrip(ks + kk * 2048, 1024, 128)
        check(sw_a == 0 and sw_b == 0, "swizzle bits")
        for r in range(64):
            for k in range(16):
                check(a + kmajor(r, k, lbo_a, sbo_a) == qs + 2 * q_off(r, 16 * kk + k), f"QK A r{r} k{k} kk{kk}")
                check(b + kmajor(r, k, lbo_b, sbo_b) == ks + 2 * q_off(r, 16 * kk + k), f"QK B n{r} k{k} kk{kk}")
    ps = base_smem + kOffP
    for d0 in (0, 256):
        for kk in range(4):  # P V: keys 16 kk .., dims d0 .. d0 + 255
            a, lbo_a, sbo_a, _ = desc_roundtrip(ps + kk * 2048, 1024, 128)
            b, lbo_b, sbo_b, _ = desc_roundtrip(ks + d0 * 128 + kk * 256, 128, 1024)
            for h in range(64):
                for k in range(16):
                    check(a + kmajor(h, k, lbo_a, sbo_a) == ps + 2 * q_off(h, 16 * kk + k), f"PV A h{h} k{k}")
            for n in range(256):
                for k in range(16):
                    # B[k][n] = V[key 16 kk + k][dim d0 + n], the key tile's row `key`, column `dim`
                    check(b + mnmajor(n, k, lbo_b, sbo_b) == ks + 2 * q_off(16 * kk + k, d0 + n),
                          f"PV B n{n} k{k} kk{kk} d0{d0}")
# the smem regions of the kernel do not overlap and fit the descriptor's 18-bit address
kBytes = kOffP + 64 * 64 * 2 + 3 * 256 + 16 + 32
check(kBytes == 205616 and base_smem + kBytes < (1 << 18), "smem total / descriptor range")
# P's writer: s[j][e] of lane (g, q4) of warp w -> row 16 w + g (+ 8), key 8 j + 2 q4 (+1), as a u32 pair
for w in range(4):
    for lane in range(32):
        g, q4 = lane >> 2, lane & 3
        for j in range(8):
            for e in range(4):
                row, key = 16 * w + g + 8 * (e >> 1), 8 * j + 2 * q4 + (e & 1)
                pair_base = q_off(16 * w + g + 8 * (e >> 1), 8 * j + 2 * q4)
                check(pair_base + (e & 1) == q_off(row, key) and pair_base % 2 == 0, "P pair store")
print("1. wgmma operands: Q K^T 2 x 32 steps, P V 2 x 2 x 4 steps checked")

# ---------------------------------------------------------------- 2. the producer's tile and bytes
for _tile in range(1):
    written = {}
    for i in range(128):
        w, lane = i >> 5, i & 31
        q = lane >> 3
        kr0 = 8 * w + (lane & 7)
        for kr in (kr0, kr0 + 32):
            # code chunks 7 q + j: load d + 7 q + j (16-byte units), dims 16 ch .. (lo) and 16 ch + 8 .. (hi)
            for j in range(7):
                ch = 7 * q + j
                src_bytes = 16 * (7 * q + j)
                check(src_bytes == 16 * ch, "code chunk source")
                word = 0 if (ch >> 2) < 4 else 1
                byte_in_word = (ch >> 2) & 3
                check(4 * word + byte_in_word == ch // 4, f"scale byte of chunk {ch}")
                check(ch // 4 < 7, "scale index < 7")
                for half in (0, 1):
                    d = 16 * ch + 8 * half
                    off = q_off(kr, d)
                    check(off % 8 == 0, "16-byte store alignment")
                    for e in range(8):
                        key = (kr, d + e)
                        check(q_off(kr, d + e) == off + e, "8 contiguous dims")
                        check(key not in written, f"double write {key}")
                        written[key] = ("code", ch, e + 8 * half)
            for c in (28 + 2 * q, 29 + 2 * q):  # RoPE chunks: load d + c
                d_main = 448 + 8 * (c - 28)  # main's warp-specialised kernel: kKvNope + 8 (ch - 28)
                d_r64 = 448 + 16 * q + (8 if c == 29 + 2 * q else 0)
                check(d_main == d_r64, f"RoPE chunk {c} dims")
                off = q_off(kr, d_r64)
                check(off % 8 == 0, "16-byte store alignment (rope)")
                for e in range(8):
                    key = (kr, d_r64 + e)
                    check(key not in written, f"double write {key}")
                    written[key] = ("rope", c, e)
    check(len(written) == 64 * 512, f"tile coverage {len(written)}")
    # store phase: 8 consecutive lanes (same q) write 8 rows of one core matrix, 128 contiguous bytes
    for w in range(4):
        for q in range(4):
            offs = sorted(2 * q_off(8 * w + l, 16 * (7 * q)) for l in range(8))
            check(offs == list(range(offs[0], offs[0] + 128, 16)), "store phase conflict-free")
    # prefetch quarters: bytes 144 q .. 144 q + 143 cover 0 .. 575, 16-byte aligned sizes
    cov = sorted(b for q in range(4) for b in range(144 * q, 144 * q + 144))
    check(cov == list(range(576)) and 144 % 16 == 0, "prefetch coverage")
    # mask: lanes 0 .. 7 of warp w hold keys 8 w + lane (q = 0); byte w and byte w + 4 of the u64 mask
    for w in range(4):
        for lane in range(8):
            kr0 = 8 * w + (lane & 7)
            check(8 * w + lane == kr0 and 8 * (w + 4) + lane == kr0 + 32, "mask bit")
print("2. producer: 64 x 512 tile written once, bytes / scales / RoPE as main's reader")

# ---------------------------------------------------------------- 3. load_q
seen = set()
for ct in range(256):
    for i in range(ct, 64 * 512 // 8, 256):
        r = (i & 7) + 8 * ((i >> 5) & 7)
        c8 = ((i >> 3) & 3) + 4 * (i >> 8)
        check(0 <= r < 64 and 0 <= c8 < 64, "q range")
        check((r, c8) not in seen, "q double")
        seen.add((r, c8))
check(len(seen) == 4096, "q coverage")
print("3. load_q: 4096 chunks once")


# ---------------------------------------------------------------- 4. split_of vs attn_split_range
def split_ref(nkeys, z, S, tile=64):
    per = (nkeys + S - 1) // S
    per = (per + tile - 1) // tile * tile
    beg = z * per if z * per < nkeys else nkeys
    end = nkeys if beg + per > nkeys else beg + per
    return beg, max(end, beg)


def split_r64(nkeys, split, S):
    M = 0xFFFFFFFF
    nk = nkeys & M
    per = ((nk + S - 1) & M) // S
    per64 = ((per + 63) & M) // 64 * 64 & M
    prod = (split * per64) & M
    beg = prod if prod < nk else nk
    end = nk if ((beg + per64) & M) > nk else (beg + per64) & M
    return beg, (end - beg) & M


rng = random.Random(1)
cases = [(n, S) for n in list(range(0, 700)) for S in (1, 2, 3, 4, 5, 9, 10, 33, 64)]
cases += [(rng.randrange(0, 1 << 31), rng.randrange(1, 65536)) for _ in range(2000)]
cases += [((1 << 31) - 1 - S, S) for S in (1, 2, 3, 100, 65535)]  # the launcher's bound: keys + splits < 2^31
for nkeys, S in cases:
    if nkeys + S >= (1 << 31):
        continue
    tot = 0
    prev_end = 0
    for z in ([*range(S)] if S <= 64 else [0, 1, S // 2, S - 2, S - 1]):
        b, e = split_ref(nkeys, z, S)
        b2, nk = split_r64(nkeys, z, S)
        check((b, e - b) == (b2, nk), f"split nkeys {nkeys} S {S} z {z}: ref {(b, e)} r64 {(b2, nk)}")
        check(nk < (1 << 31) and b2 < (1 << 31), "int range")
        if S <= 64:
            check(b == prev_end or nk == 0, "contiguous")
            prev_end = e if nk > 0 else prev_end
            tot += e - b
    if S <= 64:
        check(tot == nkeys, f"coverage nkeys {nkeys} S {S}")
print(f"4. split_of: {len(cases)} (keys, splits) cases")

# ---------------------------------------------------------------- 5. persistent item decode
for Tn, G, S in [(1, 1, 1), (3, 2, 5), (256, 1, 2), (7, 3, 64), (5, 2, 1)]:
    items = Tn * G * S
    for i in range(items):
        ts = i // S
        split = i - ts * S
        t = ts // G
        group = ts - t * G
        check(i == (t * G + group) * S + split and t < Tn and group < G and split < S, "item decode")
print("5. item_at: decode checked")


# ---------------------------------------------------------------- 6. block protocol
class Dead(Exception):
    pass


def simulate(ntiles_items, seed):
    rng = random.Random(seed)
    # mbarriers: [pending, phase], full count 128 (producer), empty 256 (S + V)
    mbar = {("full", s): [128, 0] for s in range(2)}
    mbar.update({("empty", s): [256, 0] for s in range(2)})
    mcount = {("full", s): 128 for s in range(2)}
    mcount.update({("empty", s): 256 for s in range(2)})
    # named barriers: id -> dict(count, arrived, waiting agents, contributors)
    nb = {}
    mem = {}  # region -> version
    reading = {}  # region -> set of agents with an async read in flight
    inflight = {"S": [], "V": []}  # (regions) of issued, not yet waited wgmma

    def write(agent, region, ver):
        r = reading.get(region, set())
        check(not r, f"seed {seed}: {agent} writes {region} while {r} read it asynchronously")
        mem[region] = ver

    def read(agent, region, ver):
        check(mem.get(region) == ver, f"seed {seed}: {agent} reads {region}: {mem.get(region)} expected {ver}")

    def async_read(agent, regions, vers):
        for reg, v in zip(regions, vers):
            read(agent, reg, v)
            reading.setdefault(reg, set()).add(agent)
        inflight[agent].append(regions)

    def wait_all(agent):
        for regions in inflight[agent]:
            for reg in regions:
                reading[reg].discard(agent)
        inflight[agent] = []

    # generators yield ("block", predicate) to wait; actions run inline
    def mbar_arrive(name, slot, n):
        b = mbar[(name, slot)]
        b[0] -= n
        check(b[0] >= 0, f"seed {seed}: over-arrival on {name}[{slot}]")
        if b[0] == 0:
            b[1] ^= 1
            b[0] = mcount[(name, slot)]

    def mbar_ready(name, slot, parity):
        return lambda: mbar[(name, slot)][1] != parity

    def named(agent, bid, count, is_sync):
        b = nb.setdefault(bid, {"arrived": 0, "gen": 0, "who": []})
        check(agent not in b["who"], f"seed {seed}: {agent} contributes twice to barrier {bid}'s generation")
        b["who"].append(agent)
        b["arrived"] += 128
        gen = b["gen"]
        if b["arrived"] == count:
            b["arrived"] = 0
            b["gen"] += 1
            b["who"] = []
        check(b["arrived"] <= count, "named over-count")
        if is_sync:
            return lambda: b["gen"] > gen
        return None

    items = ntiles_items

    def producer():
        gn = 0
        for it, nt in enumerate(items):
            for n in range(nt):
                slot = gn % 2
                if gn >= 2:
                    yield mbar_ready("empty", slot, ((gn // 2) - 1) & 1)
                write("P", ("slot", slot), gn)
                write("P", ("mask", slot), gn)
                mbar_arrive("full", slot, 128)
                gn += 1
                yield None

    def consumer_start(agent, it):
        write(agent, ("Q", agent), it)
        yield named(agent, "Q", 256, True)

    def s_wg():
        gn = 0
        for it, nt in enumerate(items):
            yield from consumer_start("S", it)
            for n in range(nt):
                slot = gn % 2
                yield mbar_ready("full", slot, (gn // 2) & 1)
                async_read("S", [("Q", "S"), ("Q", "V"), ("slot", slot)], [it, it, gn])  # Q K^T
                yield None
                wait_all("S")  # wgmma_wait<0>: Q K^T of n, P V of n - 1
                if n > 0:
                    mbar_arrive("empty", (gn - 1) % 2, 128)
                    yield named("S", "PFree", 256, True)
                read("S", ("mask", slot), gn)
                write("S", "P", (it, n))
                write("S", "alpha", (it, n))
                named("S", "PReady", 256, False)
                yield None
                async_read("S", ["P", ("slot", slot)], [(it, n), gn])  # P V, dims 256 ..
                gn += 1
                yield None
            wait_all("S")
            if nt > 0:
                mbar_arrive("empty", (gn - 1) % 2, 128)
            write("S", "ML", it)
            named("S", "Final", 256, False)
            yield None

    def v_wg():
        gn = 0
        for it, nt in enumerate(items):
            yield from consumer_start("V", it)
            for n in range(nt):
                slot = gn % 2
                yield named("V", "PReady", 256, True)
                read("V", "alpha", (it, n))
                async_read("V", ["P", ("slot", slot)], [(it, n), gn])
                yield None
                wait_all("V")
                mbar_arrive("empty", slot, 128)
                if n + 1 < nt:
                    named("V", "PFree", 256, False)
                gn += 1
                yield None
            wait_all("V")
            yield named("V", "Final", 256, True)
            read("V", "ML", it)
            yield None

    agents = {"P": producer(), "S": s_wg(), "V": v_wg()}
    blocked = {k: None for k in agents}
    done = set()
    steps = 0
    while len(done) < 3:
        ready = [a for a in agents if a not in done and (blocked[a] is None or blocked[a]())]
        if not ready:
            raise Dead(f"seed {seed}: deadlock, items {items}, blocked {[a for a in agents if a not in done]}")
        a = rng.choice(ready)
        blocked[a] = None
        try:
            blocked[a] = next(agents[a])
        except StopIteration:
            done.add(a)
        steps += 1
    return steps


nsim = 0
for seed in range(3000):
    r = random.Random(seed)
    nitems = r.randrange(1, 6)
    items = [r.choice([0, 0, 1, 1, 2, 3, 4, 5]) for _ in range(nitems)]
    try:
        simulate(items, seed)
    except Dead as e:
        check(False, str(e))
    nsim += 1
print(f"6. protocol: {nsim} random schedules, 1-5 items of 0-5 tiles")


# ---------------------------------------------------------------- 7. the online softmax, P V, epilogue and combine
import math
import struct


def bf16(x):  # round to nearest even, as __float2bfloat16_rn (finite x)
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", b))[0]


LOG2E = 1.4426950408889634


def kernel_split(q, keys, valid, beg, nk, scale):
    """One item of one head as the kernel computes it: per 64-key tile softmax64 (max of raw scores, then scale),
    p = bf16(2^(s scale log2e - m log2e)), alpha, acc rescaled then += p V; returns (acc, m, l)."""
    D = len(q)
    m, l = -math.inf, 0.0
    acc = [0.0] * D
    for t0 in range(0, (nk + 63) // 64 * 64, 64):
        s = []
        for k in range(64):
            kk = beg + t0 + k
            ok = t0 + k < nk and valid[kk]
            row = keys[kk] if ok else [0.0] * D  # a missing key's row: zeros
            raw = sum(a * b for a, b in zip(q, row))
            s.append((raw if ok else -math.inf, row))
        mx = max(v for v, _ in s)
        mnew = max(m, mx * scale)
        alpha = 2.0 ** ((m - mnew) * LOG2E) if mnew != -math.inf else 1.0
        ml = mnew * LOG2E
        tot = 0.0
        ps = []
        for v, row in s:
            pe = bf16(2.0 ** (v * scale * LOG2E - ml)) if mnew != -math.inf and v != -math.inf else 0.0
            ps.append((pe, row))
            tot += pe
        l = l * alpha + tot
        m = mnew
        acc = [a * alpha for a in acc]
        for pe, row in ps:
            acc = [a + pe * r for a, r in zip(acc, row)]
    return acc, m, l


def epilogue_one(acc, m, l, sink):  # attn_mma::write_rows, normalise
    M = max(m, sink)
    em = math.exp(m - M)
    f = em / (l * em + math.exp(sink - M))
    return [a * f for a in acc]


def combine(parts, sink):  # sparse_attention_fp8_combine_kernel
    M = sink
    for _, m, _ in parts:
        M = max(M, m)
    den = math.exp(sink - M)
    out = [0.0] * len(parts[0][0])
    for acc, m, l in parts:
        w = math.exp(m - M)
        den += w * l
        out = [o + w * a for o, a in zip(out, acc)]
    return [o / den for o in out]


def reference(q, keys, valid, nkeys, scale, sink):
    sc = [sum(a * b for a, b in zip(q, keys[k])) * scale for k in range(nkeys) if valid[k]]
    rows = [keys[k] for k in range(nkeys) if valid[k]]
    M = max([sink] + sc)
    w = [math.exp(v - M) for v in sc]
    den = sum(w) + math.exp(sink - M)
    D = len(q)
    return [sum(wi * r[d] for wi, r in zip(w, rows)) / den for d in range(D)]


rng = random.Random(7)
worst = 0.0
for case in range(300):
    D = 8
    nkeys = rng.choice([0, 1, 5, 63, 64, 65, 128, 130, 160, 200])
    S = rng.choice([1, 1, 2, 3, 4, 9])
    keys = [[rng.gauss(0, 1) * 2.0 ** rng.randint(-3, 3) for _ in range(D)] for _ in range(nkeys)]
    valid = [rng.random() > 0.1 for _ in range(nkeys)]
    if rng.random() < 0.1:
        valid = [False] * nkeys
    q = [rng.gauss(0, 2) for _ in range(D)]
    sink = rng.gauss(0, 2)
    scale = 1.0 / math.sqrt(D)
    parts = []
    for z in range(S):
        beg, nk = split_r64(nkeys, z, S)
        parts.append(kernel_split(q, keys, valid, beg, nk, scale))
    got = epilogue_one(*parts[0], sink) if S == 1 else combine(parts, sink)
    ref = reference(q, keys, valid, nkeys, scale, sink)
    num = math.sqrt(sum((a - b) ** 2 for a, b in zip(got, ref)))
    den = math.sqrt(sum(b * b for b in ref))
    if den == 0:
        check(num == 0, f"softmax case {case}: no key must give 0, got {got}")
        continue
    err = num / den
    worst = max(worst, err)
    check(err < 1e-2, f"softmax case {case}: nkeys {nkeys} S {S} err {err}")
print(f"7. online softmax / epilogue / combine: 300 cases vs a float64 softmax with the sink, worst {worst:.2e}")

if FAIL:
    print(f"{len(FAIL)} failures")
    sys.exit(1)
print("all checks pass")
