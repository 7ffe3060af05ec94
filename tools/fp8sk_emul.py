#!/usr/bin/env python3
"""CPU emulation of the FP8 skinny wgmma GEMM's hardware-facing side (src/ops/gemm/gemm_fp8_skinny.cu), written in
session 25 without a device. It covers what tests/unit/test_gemm_fp8_skinny.cpp (the kernel's index math and
arithmetic) does not:

1. Shared memory, byte by byte, for every kernel instance (terms x tok x wg_rows) and the plan's launch shapes:
   the TMA boxes of the two tensor maps (launch_gemm: dims, strides, boxes, 128-byte swizzle, zero fill past the
   rows) written at the producer's destinations, the token scales' cp.async chunks, and then every byte the consumers'
   wgmma descriptors (sw128_desc: start, LBO, SBO, layout bits, +32 bytes per k32 step) and scale loads read. Each
   smem byte carries a tag (which global element it came from); every operand element the wgmma reads must carry the
   tag of the element the kernel means (weight row row0 + row_off + r, k; activation row (unit0 + half) * NCOL + n,
   k), and the scale loads the (block, row) the promotion means. Also: expect_tx bytes = the boxes' bytes, the stage
   regions disjoint and 1024-aligned, the whole layout (alignment slack, ring, barriers, weight scales) within the
   plan's smem, and the split-K partial tile within the ring.
   Models, from the PTX ISA / CUDA guide (independent of the kernel's helpers): TMA SWIZZLE_128B writes box row r,
   byte c at dst + r * 128 + ((c / 16) ^ (r % 8)) * 16 + c % 16 (box-relative pattern); the wgmma 128B-swizzle
   K-major descriptor reads element (row r, byte k) at addr = start + (r / 8) * SBO + (r % 8) * 128 + k, then
   swizzles the ADDRESS: addr ^ (((addr >> 7) & 7) << 4). The two agree only for 1024-aligned tiles, which is checked.
2. The mbarrier ring protocol (produce / consume): a randomised interleaving of the producer warp, the TMA unit, the
   cp.async completions and the 8 consumer warps (two warpgroups), with mbarrier semantics (pending count, tx count,
   phase parity, try_wait.parity) and the kernel's counts (full: 33 = 1 arrive.expect_tx + 32 cp.async noinc arrivals;
   empty: 8), across ring wrap-around and persistent items. Checks: a consumer never reads a slot that holds another
   stage's data or a partial fill, the producer never refills a slot a consumer still reads, and no deadlock.

Usage: python3 tools/fp8sk_emul.py   (exit status 0 when every check passes)
"""
import random
import sys

SMEM_MAX = 227 * 1024
SMS = 132
MAX_SPLITS = 8


# ---- the plan (gemm_plan.cpp plan_gemm_fp8_skinny) and the layout helpers (gemm_fp8_skinny_launch.h) ----

def stage_w(wg_rows):
    return 64 * wg_rows * 128


def stage_x(terms, tok, wg_rows):
    return (2 // wg_rows) * terms * tok * 128


def stage_s(terms, tok, wg_rows):
    return (2 // wg_rows) * terms * tok * 4


def stage_bytes(terms, tok, wg_rows):
    return (stage_w(wg_rows) + stage_x(terms, tok, wg_rows) + stage_s(terms, tok, wg_rows) + 1023) // 1024 * 1024


def partial_bytes(tok):
    return 256 * (tok // 2) * 4


def plan(M, N, K, groups, terms, sms=SMS):
    if M < 1 or M > 256 or N < 1 or K < 128 or K % 128 or groups < 1 or terms not in (1, 2):
        return None
    r = dict(terms=terms)
    if M <= 128:
        r['wg_rows'] = 2
        tok = 8 if terms == 2 else 16
        while tok < M:
            tok *= 2
        r['tok'] = tok
    else:
        r['wg_rows'] = 1
        r['tok'] = 128
    tile_rows = 64 * r['wg_rows']
    if groups > 1 and N % tile_rows:
        return None
    halves = 2 // r['wg_rows']
    cta_tokens = halves * r['tok']
    r['token_tiles'] = (M + cta_tokens - 1) // cta_tokens
    r['units'] = r['token_tiles'] * halves
    r['row_tiles'] = groups * ((N + tile_rows - 1) // tile_rows)
    r['items'] = r['row_tiles'] * r['token_tiles']
    kbg = K // 128
    sp = 1

    def fits(s):
        return r['items'] * s <= (sms if s <= 2 else sms // 2)
    while sp < MAX_SPLITS and fits(sp * 2) and kbg % (sp * 2) == 0 and kbg // (sp * 2) >= 2:
        sp *= 2
    r['splits'] = sp
    r['kb_per_split'] = kbg // sp
    if sp > 1:
        r['grid'] = r['items'] * sp
    else:
        per = (r['items'] + sms - 1) // sms
        r['grid'] = (r['items'] + per - 1) // per
    stage = stage_bytes(terms, r['tok'], r['wg_rows'])
    fixed = 1024 + 8 * r['kb_per_split']
    r['stages'] = 0
    for st in range(8, 1, -1):
        if fixed + st * stage + 16 * st <= SMEM_MAX:
            r['stages'] = st
            break
    if r['stages'] == 0:
        return None
    if sp > 1 and r['stages'] * stage < partial_bytes(r['tok']):
        return None
    r['smem'] = fixed + r['stages'] * stage + 16 * r['stages']
    return r


def fp8sk_row(m, t, terms, tok):
    return (m // tok * terms + t) * tok + m % tok


# ---- 1. shared memory byte by byte ----

def tma_load_2d(smem, tags, dst, dims, box, c0, c1, tensor):
    """TMA tiled 2-D load, 1-byte elements, SWIZZLE_128B, zero fill out of range. Returns the bytes counted."""
    assert box[0] * 1 == 128, "SWIZZLE_128B: the inner box must be 128 bytes here"
    assert box[1] <= 256 and box[0] <= 256, "box dims <= 256"
    assert dst % 128 == 0, "TMA shared destination 128-byte aligned"
    for r in range(box[1]):
        for c in range(box[0]):
            g0, g1 = c0 + c, c1 + r
            a = dst + r * 128 + ((c // 16) ^ (r % 8)) * 16 + c % 16
            assert tags[a] is None, "two writes of one smem byte in a stage at %d" % a
            tags[a] = (tensor, g1, g0) if (g0 < dims[0] and g1 < dims[1]) else ('zero',)
    return box[0] * box[1]


def desc_fields(desc):
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    base_off = (desc >> 49) & 7
    layout = desc >> 62
    return start, lbo, sbo, base_off, layout


def sw128_desc(addr):  # gemm_fp8_skinny.cu sw128_desc over sm90::wgmma_desc
    return ((addr & 0x3FFFF) >> 4) | ((16 >> 4) << 16) | ((1024 >> 4) << 32) | (1 << 62)


def wgmma_kmajor_addr(desc, r, kbyte):
    """Address of element (row r, byte kbyte < 32) of a K-major operand under a 128B-swizzle descriptor."""
    start, _lbo, sbo, base_off, layout = desc_fields(desc)
    assert layout == 1, "128B swizzle (layout type 1 in bits 62-63)"
    assert base_off == 0
    assert kbyte < 32
    addr = start + (r // 8) * sbo + (r % 8) * 128 + kbyte
    return addr ^ (((addr >> 7) & 7) << 4)


def check_smem(M, N, K, G, terms, sms=SMS, raw_misalign=16, verbose=False):
    p = plan(M, N, K, G, terms, sms)
    assert p is not None, (M, N, K, G, terms)
    tok, wg_rows, S = p['tok'], p['wg_rows'], p['stages']
    NCOL = terms * tok
    halves = 2 // wg_rows
    sw, sx, stage = stage_w(wg_rows), stage_x(terms, tok, wg_rows), stage_bytes(terms, tok, wg_rows)
    # whole dynamic buffer: raw start misaligned, the kernel aligns up to 1024
    raw = 0x400 + raw_misalign  # sm_90: the first 1 KB of the shared window is reserved; addresses < 2^18
    smem0 = (raw + 1023) // 1024 * 1024
    bar0 = smem0 + S * stage
    wsc0 = bar0 + 16 * S
    end = wsc0 + 4 * 2 * p['kb_per_split']
    assert end - raw <= p['smem'], ("layout past the plan's smem", end - raw, p['smem'])
    assert p["smem"] <= SMEM_MAX and end < (1 << 18), "shared addresses fit the descriptor's 18 bits"
    assert bar0 % 8 == 0 and wsc0 % 4 == 0
    if p['splits'] > 1:
        assert partial_bytes(tok) <= S * stage
        assert (p['grid'] % p['splits']) == 0 and p['grid'] // p['splits'] == p['items']
    kbg = K // 128
    rows_q = p['units'] * NCOL
    # tensor maps (launch_gemm)
    wdims, wbox = (K, G * N), (128, 64 * wg_rows)
    xdims, xbox = (G * K, rows_q), (128, NCOL)
    assert K % 16 == 0 and (G * K) % 16 == 0, "global strides multiple of 16"
    nchk = 0
    items = list(range(p['items']))
    if len(items) > 6:
        items = items[:3] + items[-3:]
    for it in items:
        rt, tt = it // p['token_tiles'], it % p['token_tiles']
        row0 = rt * 64 * wg_rows
        group = row0 // N if G > 1 else 0
        unit0 = tt * halves
        for split in range(p['splits']):
            kb0 = split * p['kb_per_split']
            kb1 = min(kb0 + p['kb_per_split'], kbg)
            for kb in sorted({kb0, kb1 - 1}):
                s = (kb - kb0) % S
                base = smem0 + s * stage
                assert base % 1024 == 0
                tags = {}
                for a in range(base, base + stage):
                    tags[a] = None
                kx = group * K + kb * 128
                nbytes = tma_load_2d(None, tags, base, wdims, wbox, kb * 128, row0, 'w')
                for h in range(halves):
                    dst = base + sw + h * NCOL * 128
                    assert dst % 1024 == 0, "activation box not 1024-aligned"
                    nbytes += tma_load_2d(None, tags, dst, xdims, xbox, kx, (unit0 + h) * NCOL, 'q')
                assert nbytes == sw + sx, ("expect_tx", sw + sx, "boxes", nbytes)
                # token scales: lanes' 16-byte cp.async chunks from s + (kx / 128) * rows_q + unit0 * NCOL
                chunks = halves * NCOL // 4
                src0 = (kx // 128) * rows_q + unit0 * NCOL
                assert src0 % 4 == 0, "16-byte aligned cp.async source"
                for q in range(chunks):
                    for e in range(4):
                        a = base + sw + sx + 16 * q + 4 * e
                        assert a + 4 <= base + stage
                        for b in range(4):
                            assert tags[a + b] is None
                            tags[a + b] = ('s', src0 + 4 * q + e) if b == 0 else ('s-byte',)
                    assert src0 + 4 * q + 4 <= (kx // 128 + 1) * rows_q, "scale chunk past its block"
                # consumers
                for wg in range(2):
                    row_off = 64 * wg if wg_rows == 2 else 0
                    half = 0 if wg_rows == 2 else wg
                    a_addr = base + row_off * 128
                    b_addr = base + sw + half * NCOL * 128
                    for ks in range(4):
                        da, db = sw128_desc(a_addr + 32 * ks), sw128_desc(b_addr + 32 * ks)
                        for r in range(64):
                            for kk in range(32):
                                tg = tags[wgmma_kmajor_addr(da, r, kk)]
                                grow, gk = row0 + row_off + r, kb * 128 + 32 * ks + kk
                                want = ('w', grow, gk) if grow < G * N else ('zero',)
                                assert tg == want, ("A", wg, ks, r, kk, tg, want)
                                nchk += 1
                        for n in range(NCOL):
                            for kk in range(32):
                                tg = tags[wgmma_kmajor_addr(db, n, kk)]
                                want = ('q', (unit0 + half) * NCOL + n, kx + 32 * ks + kk)
                                assert tg == want, ("B", wg, ks, n, kk, tg, want)
                                nchk += 1
                    # token scales the promotion reads: column n of the wgmma (term n // tok, token n % tok)
                    ss = base + sw + sx
                    for n in range(NCOL):
                        term, mt = n // tok, n % tok
                        idx = half * NCOL + term * tok + mt  # fp8sk_scale_index(half, NCOL, tok, term, t, j, i)
                        tg = tags[ss + 4 * idx]
                        m = (unit0 + half) * tok + mt
                        want = ('s', (kx // 128) * rows_q + fp8sk_row(m, term, terms, tok))
                        assert tg == want, ("scale", n, tg, want)
                        nchk += 1
    if verbose:
        print("  smem ok: M=%d N=%d K=%d G=%d terms=%d tok=%d wg_rows=%d splits=%d stages=%d smem=%d (%d reads)" %
              (M, N, K, G, terms, tok, wg_rows, p['splits'], S, p['smem'], nchk))
    return p


# ---- 2. the mbarrier ring protocol ----

class MBar:
    def __init__(self, count):
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0  # parity of the phase in progress

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase ^= 1
            self.pending = self.count

    def arrive(self):
        assert self.pending > 0
        self.pending -= 1
        self._maybe_complete()

    def expect_tx(self, b):
        self.tx += b

    def complete_tx(self, b):
        self.tx -= b
        assert self.tx >= 0, "tx underflow"
        self._maybe_complete()

    def try_wait_parity(self, par):
        # true when the phase of parity `par` has completed, i.e. the phase in progress has the other parity
        return self.phase != par


def simulate_ring(S, kb_per_item, n_items, seed, tx_per_stage=3):
    """One CTA: the producer warp (lane 0 + 31 lanes), the TMA unit, the cp.async unit, 8 consumer warps."""
    rng = random.Random(seed)
    full = [MBar(33) for _ in range(S)]
    empty = [MBar(8) for _ in range(S)]
    slot_data = [None] * S        # which stage (cnt) the slot holds, once complete
    slot_pending = [0] * S        # bytes / chunks in flight for the slot
    readers = [set() for _ in range(S)]
    total = kb_per_item * n_items
    # producer: a list of lanes; lane 0 does expect_tx + TMA, every lane cp.async + arrive.noinc
    prod = {l: dict(cnt=0, state='wait_empty') for l in range(32)}
    tma_q = []      # (slot, cnt, bytes)
    cpa_q = []      # (slot, cnt, lane): a chunk and its noinc arrival (arrival after the lane's cp.asyncs land)
    cons = {w: dict(cnt=0, state='wait_full') for w in range(8)}
    writes = {}     # slot -> cnt being written

    def prod_step(l):
        st = prod[l]
        if st['cnt'] >= total:
            return False
        cnt = st['cnt']
        s, ph = cnt % S, (cnt // S) & 1
        if st['state'] == 'wait_empty':
            if not empty[s].try_wait_parity(ph ^ 1):
                return False
            st['state'] = 'issue'
            return True
        if st['state'] == 'issue':
            if readers[s]:
                raise AssertionError("producer refills slot %d while consumers %s read it" % (s, readers[s]))
            if writes.get(s, cnt) != cnt:
                # another lane started this slot for an older stage and it has not landed
                pass
            writes[s] = cnt
            if l == 0:
                full[s].expect_tx(tx_per_stage)
                full[s].arrive()
                for _ in range(tx_per_stage):
                    tma_q.append((s, cnt, 1))
            cpa_q.append((s, cnt, l))
            st['state'] = 'wait_empty'
            st['cnt'] += 1
            return True
        return False

    def cons_step(w):
        st = cons[w]
        if st['cnt'] >= total:
            return False
        cnt = st['cnt']
        s, ph = cnt % S, (cnt // S) & 1
        if st['state'] == 'wait_full':
            if not full[s].try_wait_parity(ph):
                return False
            assert slot_data[s] == cnt, "consumer %d reads slot %d: holds %s, wants stage %d" % (w, s, slot_data[s], cnt)
            readers[s].add(w)
            st['state'] = 'reading'
            return True
        if st['state'] == 'reading':
            assert slot_data[s] == cnt, "slot %d overwritten while read" % s
            readers[s].discard(w)
            empty[s].arrive()
            st['state'] = 'wait_full'
            st['cnt'] += 1
            return True
        return False

    landed = {}  # (slot, cnt) -> units landed (tx_per_stage TMA + 32 chunks)

    def land(s, cnt):
        landed[(s, cnt)] = landed.get((s, cnt), 0) + 1
        if landed[(s, cnt)] == tx_per_stage + 32:
            slot_data[s] = cnt

    def tma_step():
        if not tma_q:
            return False
        i = rng.randrange(len(tma_q))
        s, cnt, b = tma_q.pop(i)
        assert not readers[s], "TMA writes slot %d while read" % s
        land(s, cnt)
        full[s].complete_tx(b)
        return True

    def cpa_step():
        if not cpa_q:
            return False
        i = rng.randrange(len(cpa_q))
        s, cnt, l = cpa_q.pop(i)
        assert not readers[s], "cp.async writes slot %d while read" % s
        land(s, cnt)
        full[s].arrive()  # the noinc arrival (no earlier increment)
        return True

    steps = 0
    while True:
        agents = [('p', l) for l in range(32)] + [('c', w) for w in range(8)] + [('t', 0), ('a', 0)]
        rng.shuffle(agents)
        progressed = False
        for kind, i in agents:
            ok = (prod_step(i) if kind == 'p' else cons_step(i) if kind == 'c' else
                  tma_step() if kind == 't' else cpa_step())
            if ok:
                progressed = True
                steps += 1
                break
        if not progressed:
            break
    done = all(c['cnt'] >= total for c in cons.values()) and all(p_['cnt'] >= total for p_ in prod.values())
    assert done, "deadlock: producer %s consumers %s" % ([p_['cnt'] for p_ in prod.values()][:2],
                                                         [c['cnt'] for c in cons.values()])
    assert not tma_q and not cpa_q
    return steps


def main():
    ok = True
    print("1. shared memory: TMA boxes -> wgmma descriptors / scale loads, every instance")
    cases = [
        # (M, N, K, groups, terms): the V4-Flash shapes of the GPU test and the odd ones
        (1, 1024, 4096, 1, 2), (8, 1024, 4096, 1, 2), (9, 1024, 4096, 1, 2), (31, 1024, 4096, 1, 2),
        (64, 1024, 4096, 1, 2), (100, 1024, 4096, 1, 2), (128, 1024, 4096, 1, 2), (129, 1024, 4096, 1, 2),
        (256, 1024, 4096, 1, 2),
        (1, 1024, 4096, 1, 1), (17, 1024, 4096, 1, 1), (33, 1024, 4096, 1, 1), (100, 1024, 4096, 1, 1),
        (200, 1024, 4096, 1, 1),
        (1, 4096, 8192, 1, 2), (130, 4096, 8192, 1, 2), (8, 32768, 1024, 1, 2), (256, 32768, 1024, 1, 2),
        (1, 1024, 4096, 8, 2), (17, 1024, 4096, 8, 2), (256, 1024, 4096, 8, 2),
        (1, 200, 384, 1, 2), (7, 200, 384, 1, 1), (66, 200, 384, 1, 2), (131, 200, 384, 1, 2), (131, 200, 384, 1, 1),
        (1, 512, 4096, 1, 2), (256, 512, 4096, 1, 2),
    ]
    seen = set()
    for c in cases:
        try:
            p = check_smem(*c, verbose=True)
            seen.add((c[4], p['tok'], p['wg_rows']))
        except AssertionError as e:
            ok = False
            print("  FAIL", c, e)
    want = {(2, t, 2) for t in (8, 16, 32, 64, 128)} | {(1, t, 2) for t in (16, 32, 64, 128)} | {(2, 128, 1),
                                                                                                 (1, 128, 1)}
    if not want <= seen:
        ok = False
        print("  FAIL: instances not covered", sorted(want - seen))
    print("2. mbarrier ring: random interleavings")
    n = 0
    for S in range(2, 9):
        for kb in (1, 2, 3, 5, 8):
            for items in (1, 2, 3):
                for seed in range(6):
                    try:
                        simulate_ring(S, kb, items, seed * 1000 + S * 10 + kb)
                        n += 1
                    except AssertionError as e:
                        ok = False
                        print("  FAIL S=%d kb=%d items=%d seed=%d: %s" % (S, kb, items, seed, e))
    print("  %d schedules ok" % n)
    print("ALL OK" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
