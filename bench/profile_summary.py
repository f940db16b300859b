"""Rank the functions of a `--profile` capture: `python -m bench.profile_summary FILE [--top N]`.

FILE is one process's collapsed stacks (`frames count` per line, as `py-spy record --format raw`
writes them). Prints the share of samples each function is on the stack for (inclusive) and at the
top of (self). The captures hold only samples taken while the process held the GIL, so they show
where the process's Python time goes, not time spent waiting or in native code without the GIL.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def summarize(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, inclusive counts, self counts), functions named without their line numbers."""
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        frames = [
            _LINE.sub(")", frame)
            for frame in stack.split(";")
            if not frame.startswith(("process ", "thread "))
        ]
        total += samples
        for frame in set(frames):
            inclusive[frame] += samples
        if frames:
            own[frames[-1]] += samples
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_summary", description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    total, inclusive, own = summarize(args.file)
    print(f"{args.file}: {total} samples")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"--- {title}")
        for frame, samples in counts.most_common(args.top):
            print(f"{100 * samples / max(total, 1):5.1f}%  {frame}")


if __name__ == "__main__":
    main()
