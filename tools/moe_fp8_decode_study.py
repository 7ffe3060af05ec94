#!/usr/bin/env python3
"""Numerics study for an FP8 decode MoE kernel (session 32; a design input for issue 31, not a test): two-term e4m3
activations (hi = e4m3(v), lo = e4m3(v - hi) under one scale, as the FP8 prefill kernels) with per-token-row scales
against per-128 (x) / per-64 or per-32 (h) blocks, the exact expert and the bf16 x / h of the decode kernels today.
FP4 E2M1 weights with E8M0 scales per 32 (exact in every variant). Prints the normalised L2 error of the expert
output over 32 tokens for four outlier patterns of x. Needs numpy and ml_dtypes (pip); nothing else runs it.
"""
import ml_dtypes
import numpy as np

rng = np.random.default_rng(5)
D, I, tokens, limit = 1024, 512, 32, 10.0
e2m1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
def fp4_weight(rows, cols):
    codes = rng.integers(0, 16, (rows, cols))
    sc = rng.integers(118, 121, (rows, cols // 32))
    return (e2m1[codes] * np.repeat(2.0 ** (sc - 127), 32, axis=1)).astype(np.float32)
W1, W3, W2 = fp4_weight(I, D), fp4_weight(I, D), fp4_weight(D, I)
def bf16(a):
    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def e4m3(a):
    return np.clip(a, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def two_term(a, block):  # rows of a in 1 x block blocks: s = amax / 448, hi = e4m3(a / s), lo = e4m3(a / s - hi)
    r, c = a.shape
    b = a.reshape(r, c // block, block)
    amax = np.abs(b).max(axis=2, keepdims=True)
    s = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
    v = (b / s).astype(np.float32)
    hi = e4m3(v)
    lo = e4m3(v - hi)
    return ((hi + lo) * s).reshape(r, c)
def expert(x, qx, qh):
    g = np.minimum(qx(x) @ W1.T.astype(np.float64), limit)
    u = np.clip(qx(x) @ W3.T.astype(np.float64), -limit, limit)
    h = (g / (1 + np.exp(-g)) * u).astype(np.float32)
    return qh(h).astype(np.float64) @ W2.T.astype(np.float64)
def study(outlier, every):
    g = rng.uniform(-1, 1, (tokens, D, 4)).sum(axis=2) * 0.866
    mask = (np.arange(D) % every == 0)
    x = (g * np.where(mask, outlier, 1.0)).astype(np.float32)
    ex = expert(x, lambda a: a.astype(np.float64), lambda a: a)
    def err(qx, qh):
        y = expert(x, qx, qh)
        return np.sqrt(((y - ex) ** 2).sum() / (ex ** 2).sum())
    rows = [("bf16 x, h (decode today)", err(bf16, bf16)),
            ("two-term x/128, h/64 (prefill FP8)", err(lambda a: two_term(a, 128), lambda a: two_term(a, 64))),
            ("two-term x/row, h/32", err(lambda a: two_term(a, D), lambda a: two_term(a, 32))),
            ("two-term x/row, h/row", err(lambda a: two_term(a, D), lambda a: two_term(a, I))),
            ("two-term x/128, h/32", err(lambda a: two_term(a, 128), lambda a: two_term(a, 32)))]
    print(f"x outliers x{outlier} every {every} channels:")
    for n, e in rows:
        print(f"  {n:38s} {e:.3e}")
for o, e in ((8, 97), (64, 97), (512, 211), (2048, 1024)):
    study(o, e)
