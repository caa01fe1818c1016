"""Sealed-reasoning benchmark: seal and open per KB of reasoning, and refusing garbage.

Times the gateway's key ring (AES-GCM with HKDF-derived keys, ``dsmlkit.server.sealing``)
sealing and opening reasoning of several sizes (microseconds per KB, the median of a fixed
number of rounds), and refusing a garbage token of ``--garbage-mb`` MB. With ``--before
SRC`` the same figures are taken, in a child process, for the ``seal(key, text)`` /
``unseal(key, token)`` functions of an older dsmlkit checkout's ``SRC`` directory (the
standard-library cipher the key ring replaced), and both print in one table:

    python bench/bench_seal.py
    python bench/bench_seal.py --before /path/to/older/checkout/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SIZES_KB = (1, 16, 256, 1024)

#: What the child process runs against the older checkout: it times that checkout's sealing
#: functions with the same method (``_figures``, passed in as source, so it imports what it
#: needs itself).
_BEFORE = """
from __future__ import annotations
import json
from dsmlkit.api.seal import seal, unseal
key = b"bench-secret"
{figures}
print(json.dumps(_figures(lambda t: seal(key, t), lambda t: unseal(key, t),
                          "dsmlkit-r1.", {sizes}, {rounds}, {garbage_mb})))
"""


def _figures(
    seal: Callable[[str], str],
    open_: Callable[[str], str],
    prefix: str,
    sizes_kb: tuple[int, ...],
    rounds: int,
    garbage_mb: float,
) -> dict[str, Any]:
    """``{"seal": {kb: µs per KB}, "open": {…}, "garbage_s": seconds}`` (medians)."""
    import contextlib
    import statistics
    import time

    text = "The user wants the weather in Paris, so I call get_weather. "
    out: dict[str, dict[int, float]] = {"seal": {}, "open": {}}
    for kb in sizes_kb:
        plain = (text * (kb * 1024 // len(text) + 1))[: kb * 1024]
        token = seal(plain)
        assert open_(token) == plain
        for name, run, arg in (("seal", seal, plain), ("open", open_, token)):
            times = []
            for _ in range(max(3, rounds // kb)):
                started = time.perf_counter()
                run(arg)
                times.append(time.perf_counter() - started)
            out[name][kb] = statistics.median(times) * 1e6 / kb
    garbage = prefix + "A" * int(garbage_mb * 1024 * 1024)
    started = time.perf_counter()
    with contextlib.suppress(ValueError):  # refused, as it must be
        open_(garbage)
    return {**out, "garbage_s": time.perf_counter() - started}


def _new(rounds: int, garbage_mb: float) -> dict[str, Any]:
    from dsmlkit.server.sealing import PREFIXES, KeyRing

    ring = KeyRing([os.urandom(32)])
    return _figures(
        lambda t: ring.seal(t, "deepseek-v4.1"),
        lambda t: ring.open(t, "deepseek-v4.1"),
        PREFIXES["reasoning"],
        SIZES_KB,
        rounds,
        garbage_mb,
    )


def _before(src: str, rounds: int, garbage_mb: float) -> dict[str, Any]:
    import inspect

    code = _BEFORE.format(
        figures=inspect.getsource(_figures), sizes=SIZES_KB, rounds=rounds, garbage_mb=garbage_mb
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="SRC", help="an older checkout's src directory")
    parser.add_argument("--rounds", type=int, default=200, help="rounds at 1 KB (default 200)")
    parser.add_argument("--garbage-mb", type=float, default=24.0, help="(default 24)")
    args = parser.parse_args()
    columns = {"key ring (AES-GCM)": _new(args.rounds, args.garbage_mb)}
    if args.before:
        columns["before (" + args.before + ")"] = _before(args.before, args.rounds, args.garbage_mb)
    print(f"{'µs per KB':<22}" + "".join(f"{name:>32}" for name in columns))
    for kind in ("seal", "open"):
        for kb in SIZES_KB:
            row = f"{kind} {kb:>5} KB"
            print(f"{row:<22}" + "".join(f"{_at(c[kind], kb):>32.2f}" for c in columns.values()))
    print(
        f"{'refuse ' + str(args.garbage_mb) + ' MB (s)':<22}"
        + "".join(f"{c['garbage_s']:>32.6f}" for c in columns.values())
    )


def _at(figures: dict[Any, float], kb: int) -> float:
    """The figure for ``kb`` (JSON from the child has string keys)."""
    return figures.get(kb, figures.get(str(kb), float("nan")))


if __name__ == "__main__":
    main()
