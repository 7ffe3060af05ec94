#!/usr/bin/env python3
"""Barrier-protocol model of src/ops/sparse_attention/sparse_attention_prefill_split.cu (one block; session 24).

Agents: producer groups 0 / 1 (group 0 also issues each item's Q by TMA), consumer warpgroups 0 / 1; the kernel's
mbarriers (ready / free of each key block's dim half, qfull, qfree) and named barriers (max, P, row sums), with
arrival counts scaled to one per agent. Asynchronous completions (cp.async's arrive-on-landing, the TMA) are delivered
at random later points. Over random item lists (0 to 5 steps an item) and random interleavings it checks that no
schedule deadlocks and that every read of a key half, of P and of Q sees the right step's data from its issue to the
arrival that releases it. A CPU check of the protocol only (no arithmetic); run it after changing the barriers.
Exit 1 on any failure."""
# Barrier-protocol model of prefill_split_kernel (one block): producer groups 0/1 (group 0 also issues Q), consumer
# warpgroups 0/1. Agents are generators yielding ('wait', pred) ; arrivals are instantaneous; async completions
# (cp.async noinc, TMA) are delivered later by a random 'hardware' agent. Checks: no deadlock, and every read of a
# buffer happens while its content is the right step's (versions).
import random, sys
class MB:
    def __init__(s, n): s.n=n; s.pend=n; s.phase=0
    def arrive(s):
        s.pend-=1
        assert s.pend>=0
        if s.pend==0: s.phase+=1; s.pend=s.n
    def done(s, parity): return (s.phase & 1) != parity
class NB:
    def __init__(s, n): s.n=n; s.cnt=0; s.gen=0
def run(items_steps, seed):
    rnd=random.Random(seed)
    ready={(c,h):MB(2) for c in (0,1) for h in (0,1)}   # 1 copy-arrival + 1 plain arrival per producer group (scaled)
    free={(c,h):MB(1) for c in (0,1) for h in (0,1)}    # one consumer warpgroup (scaled)
    qfull=MB(1); qfree=MB(2)
    nb={k:NB(2) for k in ('max','p','l')}
    pending=[]  # async completions: callables
    kver={(c,h):None for c in (0,1) for h in (0,1)}  # which global step the half holds
    qver=[None]; pver={0:None,1:None}
    errors=[]
    def producer(pc):
        step=0
        for k,ns in enumerate(items_steps):
            if pc==0:
                if k>0:
                    yield ('wait', lambda k=k: qfree.done((k-1)&1))
                def tma(k=k):
                    qver[0]=k; qfull.arrive()
                pending.append(tma)
            for j in range(ns):
                for hh in (0,1):
                    h=pc^hh
                    if step>0:
                        yield ('wait', lambda h=h,step=step: free[(pc,h)].done((step-1)&1))
                    def land(h=h,step=step): kver[(pc,h)]=step; ready[(pc,h)].arrive()
                    pending.append(land)      # noinc arrival when the copies land
                    ready[(pc,h)].arrive()    # plain arrival (flags)
                step+=1
    def namedsync(name):
        b=nb[name]; g=b.gen; b.cnt+=1
        if b.cnt==b.n: b.cnt=0; b.gen+=1
        yield ('wait', lambda: b.gen>g)
    def consumer(c):
        step=0
        for k,ns in enumerate(items_steps):
            yield ('wait', lambda k=k: qfull.done(k&1))
            if qver[0]!=k: errors.append(f'c{c} item {k} sees Q of {qver[0]}')
            if ns==0: qfree.arrive()
            for j in range(ns):
                s=step
                yield ('wait', lambda s=s: ready[(c,c)].done(s&1))
                if kver[(c,c)]!=s: errors.append(f'c{c} QK own half step {s} sees {kver[(c,c)]}')
                if qver[0]!=k: errors.append(f'c{c} QK sees Q {qver[0]} at item {k}')
                if j>0:
                    if kver[(c^1,c)]!=s-1 or pver[c^1]!=s-1: errors.append(f'c{c} SS {s-1} overwritten before release')
                    free[(c^1,c)].arrive()
                yield ('wait', lambda s=s: ready[(c,c^1)].done(s&1))
                if kver[(c,c^1)]!=s: errors.append(f'c{c} QK other half step {s} sees {kver[(c,c^1)]}')
                if qver[0]!=k: errors.append(f'c{c} QK2 sees Q {qver[0]} at item {k}')
                if j==ns-1:
                    if qver[0]!=k: errors.append('Q overwritten before qfree')
                    qfree.arrive()
                yield from namedsync('max')
                # RS P V: reads K[c][c]
                if kver[(c,c)]!=s: errors.append(f'c{c} RS step {s} sees {kver[(c,c)]}')
                pver[c]=s
                if kver[(c,c)]!=s: errors.append('RS overwritten')
                free[(c,c)].arrive()
                yield from namedsync('p')
                # SS P V: reads P of c^1 and K[c^1][c]; completes before the next step's free arrival
                if pver[c^1]!=s: errors.append(f'c{c} SS step {s} sees P {pver[c^1]}')
                if kver[(c^1,c)]!=s: errors.append(f'c{c} SS step {s} sees K {kver[(c^1,c)]}')
                step+=1
            if ns>0:
                if kver[(c^1,c)]!=step-1 or pver[c^1]!=step-1: errors.append(f'c{c} last SS overwritten before release')
                free[(c^1,c)].arrive()
            yield from namedsync('l')
    agents=[producer(0),producer(1),consumer(0),consumer(1)]
    waits=[None]*4; alive=[True]*4
    while True:
        runnable=[i for i in range(4) if alive[i] and (waits[i] is None or waits[i]())]
        opts=runnable+(['hw'] if pending else [])
        if not opts:
            if any(alive): return 'DEADLOCK', errors
            return 'ok', errors
        ch=rnd.choice(opts)
        if ch=='hw':
            pending.pop(rnd.randrange(len(pending)))()
            continue
        try:
            ev=next(agents[ch]); waits[ch]=ev[1]
        except StopIteration:
            alive[ch]=False; waits[ch]=None
bad=0
for seed in range(3000):
    rnd=random.Random(seed)
    items=[rnd.choice([0,1,1,2,3,5]) for _ in range(rnd.randint(1,6))]
    r,e=run(items,seed)
    if r!='ok' or e:
        bad+=1
        if bad<5: print(seed, items, r, e[:3])
print('schedules with a deadlock or a stale read:', bad)
sys.exit(1 if bad else 0)
