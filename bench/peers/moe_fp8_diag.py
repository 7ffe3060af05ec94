#!/usr/bin/env python3
"""Timing-only variants of the FP8 grouped MoE kernel (issue 30): rewrites src/ops/moe/moe_grouped_fp8.cu so that one
part of the kernel is left out, for `dsinfer_moe_bench grouped` builds whose times, differenced against the real
kernel's, place the cost (bench/NOTES.md, issue 30 third session). The results of such a build are wrong on purpose:
never commit the rewritten file (`git checkout src/ops/moe/moe_grouped_fp8.cu` after copying the bench binary).
Usage: moe_fp8_diag.py FLAGS (sum of: 1 consumers skip wgmma + promotion, 2 no A loads, 4 no expansion, 8 no weight
loads (stale scale bytes then take fp4_e4m3_table's slow path: not a valid timing), 16 no second-term wgmmas)."""
import sys

PATH = "src/ops/moe/moe_grouped_fp8.cu"


def main():
    flags = int(sys.argv[1])
    with open(PATH) as fh:
        s = fh.read()

    def rep(a, b):
        nonlocal s
        if a not in s:
            sys.exit(f"moe_fp8_diag: pattern not found (the kernel changed): {a[:60]!r}")
        s = s.replace(a, b)

    if flags & 8:
        rep("    load_b(bs, c % nk, sm.raw(c));", "    (void)bs;")
    if flags & 2:
        rep("    load_a<kGateUp>(p, as, c % nk, slot);\n    mbar_arrive_cp_async(sm.full(c));",
            "    (void)slot;\n    mbar_arrive(sm.full(c));")
    if flags & 4:
        rep("    expand_row<kGateUp>(sm.ptr(sm.raw(c)), sm.ptr(slot + kOffB), "
            "reinterpret_cast<float*>(sm.ptr(slot + kOffSb)));", "")
    if flags & 16:
        rep("    wgmma_m64n128k32(blk, smem_desc(a_tile + kA + off), db, 1);", "")
    if flags & 1:
        rep("        for (int bi = 0; bi < NB; ++bi) {\n          issue_block",
            "        for (int bi = 0; bi < 0; ++bi) {\n          issue_block")
    with open(PATH, "w") as fh:
        fh.write("#pragma nv_diag_suppress 177\n" + s)  # the helpers left unused


if __name__ == "__main__":
    main()
