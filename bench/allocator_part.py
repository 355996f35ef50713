"""bench/run's allocator part: the 256 MiB float32 rows of kernels_cpu and backward_cpu run three
times in a row: as shipped (customop's CPU output cache on), with the cache off
(CUSTOMOP_CPU_CACHE_BYTES=0: glibc's default allocator), and with the cache off but glibc keeping
freed memory; their rows of the table (info: the judged rows are parts 3 and 3b, as shipped).

Why: glibc serves an allocation above its mmap threshold (at most 32 MiB) with a fresh mmap and
unmaps it when freed, so an op that returns a new 256 MiB tensor takes a page fault per 4 KiB
page of it on every call: the kernel first touches zero-filled pages the OS maps one by one.
copy_ into a kept tensor pays none. customop's CPU output cache (customop/cpu_cache.h) keeps its
ops' freed output blocks for the next call. GLIBC_TUNABLES=glibc.malloc.mmap_max=0 (no mmap:
every block from the heap) with a trim threshold above the working set (freed memory stays in
the process) does the same for every allocation: what a caching allocator (jemalloc, tcmalloc,
as PyTorch's CPU performance guide recommends) gives. The same binaries, the same sizes, one
after the other.
"""

import os

MIB = 1 << 20
SIZE = 256 * MIB
KEEP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"  # 16 GiB
OPS = ("rms_norm", "bias_gelu", "clamp_count", "masked_softmax", "max_along", "weighted_sum")


def run(build, quick, gbench, to_ns):
    """{(program, name, allocator): GB/s}, {label: error}. Nothing for --quick (no 256 MiB)."""
    if quick:
        return {}, {}
    out, errors = {}, {}
    names = "|".join(OPS)
    programs = (("kernels_cpu", f"^(copy/(copy_|clone)|({names})/customop)/{SIZE}/"),
                ("backward_cpu", f"^({names})/customop/{SIZE}/"))
    off = dict(os.environ, CUSTOMOP_CPU_CACHE_BYTES="0")
    for alloc, env in (("cache", None), ("off", off), ("kept", dict(off, GLIBC_TUNABLES=KEEP))):
        for prog, filt in programs:
            try:
                _, runs, errs = gbench(os.path.join(build, "bench", prog),
                                       [f"--benchmark_filter={filt}", "--benchmark_repetitions=3"],
                                       env=env)
            except RuntimeError as e:
                errors[f"{prog} ({alloc})"] = str(e)[-300:]
                continue
            errors.update({f"{prog} {n} ({alloc})": m for n, m in errs.items()})
            for name, bs in runs.items():  # <op>/<variant>/<bytes>
                best = min(to_ns(b, "real_time") for b in bs)
                out[(prog, name.rsplit("/", 1)[0], alloc)] = bs[0]["bytes_moved"] / best
    return out, errors


def rows(m, add):
    """Adds the part's rows through add(part, comparison, case, value, target, ok)."""
    if not m:
        return
    part = "3c allocator"
    case = "256 MiB float32: output cache (as shipped) / cache off / cache off, glibc keeps freed memory"
    allocs = ("cache", "off", "kept")

    def pct(prog, name, alloc):
        copy = m.get(("kernels_cpu", "copy/copy_", alloc))
        v = m.get((prog, name, alloc))
        return f"{100 * v / copy:.0f}%" if v and copy else "n/a"

    add(part, "clone (a fresh output): GB/s / copy_ GB/s", case,
        " / ".join(pct("kernels_cpu", "copy/clone", a) for a in allocs), "(info)", None)
    for op in OPS:
        for prog, what in (("kernels_cpu", "forward"), ("backward_cpu", "backward")):
            name = f"{op}/customop"
            add(part, f"{op} {what}: customop GB/s / copy_ GB/s", case,
                " / ".join(pct(prog, name, a) for a in allocs), "(info)", None)


def details(m):
    """The raw GB/s behind the rows, as markdown lines."""
    if not m:
        return []
    out = ["", "Allocator (part 3c; GB/s at 256 MiB float32, best of 3; cache = as shipped, off = "
           f"CUSTOMOP_CPU_CACHE_BYTES=0, kept = that and GLIBC_TUNABLES={KEEP}):",
           "", "| program | benchmark | cache | off | kept |", "|---|---|---|---|---|"]
    for prog, name in sorted({(k[0], k[1]) for k in m}):
        out.append(f"| {prog} | {name} | "
                   + " | ".join(f"{m.get((prog, name, a), 0):.1f}" for a in ("cache", "off", "kept"))
                   + " |")
    return out
