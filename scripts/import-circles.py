#!/usr/bin/env python3
"""Import circles (strongly connected components) among the files of one crate's src/.

    python3 scripts/import-circles.py crates/meridian-server/src [-v] [-e]

Edges: `crate::a::b` and `super::x` paths anywhere in a file (use lines and inline paths),
including `use crate::{a, b::c}` groups, resolved to the deepest module file that exists.
Test modules (files named tests.rs or *_tests.rs, and inline `mod tests`) are skipped.
-v lists each circle's files, -e also the edges inside it."""
import os, re, sys
root = sys.argv[1]; verbose = '-v' in sys.argv
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(d, f); rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
            files[tuple(rel)] = p
def skip(mp):
    return mp and (mp[-1] == 'tests' or mp[-1].endswith('_tests'))
def resolve(parts):
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in files: return tuple(parts[:n])
    return None
def expand(prefix, body):
    # body of a braced group -> list of paths
    out, depth, cur = [], 0, ''
    for ch in body:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''
        else: cur += ch
    if cur.strip(): out.append(cur.strip())
    res = []
    for item in out:
        m = re.match(r'([\w:]*?)::\{(.*)\}$', item, re.S)
        if m: res += expand(prefix + m.group(1).split('::'), m.group(2))
        else: res.append(prefix + [x for x in item.split(' as ')[0].split('::') if x])
    return res
edges = {m: set() for m in files if not skip(m)}
for mp, p in files.items():
    if skip(mp): continue
    src = open(p).read()
    src = re.sub(r'//[^\n]*', '', src)
    # cut inline test module
    i = src.find('#[cfg(test)]\nmod tests')
    if i >= 0: src = src[:i]
    paths = []
    for m in re.finditer(r'\bcrate::\{([^;]*?)\};', src, re.S):
        paths += expand([], m.group(1))
    for m in re.finditer(r'\bcrate((?:::\w+)+)(::\{([^;]*?)\})?', src, re.S):
        pre = [x for x in m.group(1).split('::') if x]
        if m.group(3): paths += expand(pre, m.group(3))
        else: paths.append(pre)
    for m in re.finditer(r'\b((?:super::)+)(\w+(?:::\w+)*)(::\{([^;]*?)\})?', src, re.S):
        up = m.group(1).count('super::')
        b = list(mp[:max(0, len(mp) - up)])
        pre = b + m.group(2).split('::')
        if m.group(4): paths += expand(pre, m.group(4))
        else: paths.append(pre)
    for pth in paths:
        t = resolve(pth)
        if t and t != mp and not skip(t) and t != (): edges[mp].add(t)
# tarjan
idx, low, st, on, out, c = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        out.append(comp)
for v in edges:
    if v not in idx: sc(v)
big = sorted([x for x in out if len(x) > 1], key=len, reverse=True)
print(f"{root}: {len(files)} files, circles: {[len(x) for x in big]}")
if verbose:
    for comp in big:
        names = sorted('/'.join(m) or 'lib' for m in comp)
        print(f"  {len(comp)}: {' '.join(names)}")
        if '-e' in sys.argv:
            s = set(comp)
            for m in sorted(comp):
                print('     ', '/'.join(m), '->', ' '.join(sorted('/'.join(t) for t in edges[m] if t in s)))
