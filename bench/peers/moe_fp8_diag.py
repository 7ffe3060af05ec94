#!/usr/bin/env python3
"""Timing-only variants of the FP8 grouped MoE kernel (issue 30): rewrites src/ops/moe/moe_grouped_fp8.cu so that one
part of the kernel is left out, for `dsinfer_moe_bench grouped` builds whose times, differenced against the real
kernel's, place the cost (bench/NOTES.md, issue 30 third session and session 12). The results of such a build are
wrong on purpose (except flag 32's): never commit the rewritten file (`git checkout src/ops/moe/moe_grouped_fp8.cu`
after copying the bench binary).
Usage: moe_fp8_diag.py FLAGS (sum of: 1 consumers skip wgmma + promotion (the producer alone), 4 no
expansion, 16 no second-term wgmmas, 32 no turns between the consumer warpgroups (results still right))."""
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

    if flags & 4:
        rep("    expand_row<kGateUp>(sm.ptr(sm.raw(c)), sm.ptr(slot + kOffB), "
            "reinterpret_cast<float*>(sm.ptr(slot + kOffSb)));", "")
    if flags & 16:
        rep("    wgmma_m64n128k32(blk, smem_desc(a_tile + kA + off), db, 1);", "")
    if flags & 1:
        rep("        if (live) {\n          issue_block", "        if (false) {\n          issue_block")
    if flags & 32:
        rep('asm volatile("bar.sync %0, 256;\\n" ::"r"(id) : "memory");', "(void)id;")
        rep('asm volatile("bar.arrive %0, 256;\\n" ::"r"(id) : "memory");', "(void)id;")
    with open(PATH, "w") as fh:
        fh.write("#pragma nv_diag_suppress 177\n" + s)  # the helpers left unused


if __name__ == "__main__":
    main()
