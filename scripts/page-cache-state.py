#!/usr/bin/env python3
"""Sets the page size a model file's page-cache folios have, for benchmarks (Linux).

usage: scripts/page-cache-state.py FILE small|huge

Drops FILE from the page cache (posix_fadvise DONTNEED) and reads it back through a mapping
advised MADV_RANDOM (order-0 folios: 4 KiB pages) or MADV_HUGEPAGE (2 MiB folios where the
kernel and file system allow them), then prints how much of a fresh mapping of it is in
2 MiB pages. `kvpack bench` prints the same figure for the weights it mapped
(docs/performance-history.md, session 26). Pages that another process has mapped are not
dropped.
"""
import mmap
import os
import sys


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("small", "huge"):
        sys.exit(__doc__.strip().split("\n\n")[1])
    path, state = sys.argv[1], sys.argv[2]
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    with open(path, "rb") as f:
        total = 0
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        m.madvise(mmap.MADV_RANDOM if state == "small" else mmap.MADV_HUGEPAGE)
        for i in range(0, len(m), 4096):
            total += m[i]
        m.close()
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        for i in range(0, len(m), 4096):
            total += m[i]
        with open("/proc/self/smaps_rollup") as smaps:
            pmd_kb = next(int(l.split()[1]) for l in smaps if l.startswith("FilePmdMapped:"))
        m.close()
    print(f"{path}: {state}; {pmd_kb // 1024} MiB of {os.path.getsize(path) >> 20} MiB "
          "mapped in 2 MiB pages")


if __name__ == "__main__":
    main()
