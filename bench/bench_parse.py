"""Parser benchmark: streaming cost per delta, growth with size, and the peers side by side.

    python bench/bench_parse.py                 # dsmlkit only (about a minute)
    python bench/bench_parse.py --peers         # plus vLLM's and SGLang's parsers, same inputs

The peers run in the venv made by ``bash bench/peers/peers-install.sh`` (``--peers-python``,
default ``.peers-venv/bin/python``), driven by ``bench/peers/peers.py`` the way their
servers drive them. They are never a dependency of dsmlkit. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.adversarial: the shapes the work-count test uses

from tests.adversarial import SHAPES  # noqa: E402

from dsmlkit.dialects import DEFAULT_DIALECT, DIALECTS, get_dialect  # noqa: E402
from dsmlkit.parse import MessageCollector, Parser  # noqa: E402

DELTA = 4
KB = 1000
TOOLS = [
    {
        "name": "write",
        "description": "Write a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        },
    }
]
CODE_WORDS = [
    "def", "return", "self.value", "for i in range(n):", "print(i)", "if x == 1:", "else:",
    "import os", "x += 1", "# note", "'text'", '"quoted"', "[1, 2]", "{'a': 1}", "\n", "    ",
]  # fmt: skip


def code_text(size: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(CODE_WORDS)
        words.append(word)
        total += len(word) + 1
    return " ".join(words)[:size]


def adversarial_text(size: int, dialect_name: str) -> str:
    """A value dense with '<', partial markers and literal closers (each one decided)."""
    d = get_dialect(dialect_name)
    pieces = ["a<b", " <", d.parameter_close() + " x", d.invoke_close(), d.block_close(), "<｜DS"]
    text = " ".join(pieces)
    return (text * (size // len(text) + 1))[:size]


def call_output(value: str, dialect_name: str) -> str:
    d = get_dialect(dialect_name)
    return (
        f"\n\n{d.block_open()}\n{d.invoke_open('write')}\n"
        f"{d.parameter_open('path', True)}notes.txt{d.parameter_close()}\n"
        f"{d.parameter_open('content', True)}{value}{d.parameter_close()}\n"
        f"{d.invoke_close()}\n{d.block_close()}"
    )


def chunked(text: str, size: int = DELTA) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def ours(text: str, dialect: str, chunks: list[str] | None, start_in: str = "content") -> float:
    """CPU seconds for one parse (streamed when chunks are given)."""
    parser = Parser(dialect, start_in=start_in)  # type: ignore[arg-type]
    collector = MessageCollector()
    feed, add = parser.feed, collector.add
    started = time.process_time()
    for chunk in chunks if chunks is not None else (text,):
        add(feed(chunk))
    add(parser.close())
    elapsed = time.process_time() - started
    message = collector.message()
    assert message.content or message.reasoning or message.calls
    return elapsed


def best_of(
    repeats: int, text: str, dialect: str, chunks: list[str] | None, start_in: str = "content"
) -> float:
    return min(ours(text, dialect, chunks, start_in) for _ in range(repeats))


def cli_cpu(path: Path, dialect: str) -> float:
    """Whole-process CPU seconds of ``dsmlkit parse --chunk-size 4 FILE``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "dsmlkit", "parse", "--dialect", dialect, "--chunk-size",
         str(DELTA), str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def linearity(dialect: str, repeats: int, sizes: tuple[int, int] = (100 * KB, 400 * KB)) -> None:
    """Print each adversarial shape's time growth exponent (whole and streamed)."""
    d = get_dialect(dialect)
    print(f"\nlinearity, {sizes[0] // KB} KB -> {sizes[1] // KB} KB (target exponent <= 1.1):")
    print(f"{'shape':<30}{'whole exp':>10}{'stream exp':>11}{'stream s':>10}{'work/char':>10}")
    for name, shape in SHAPES.items():
        texts = [shape(d, size) for size in sizes]
        ratio = math.log(len(texts[1]) / len(texts[0]))
        row = f"{name:<30}"
        for chunks in (False, True):
            times = [best_of(repeats, t, dialect, chunked(t) if chunks else None) for t in texts]
            exponent = math.log(max(times[1], 1e-6) / max(times[0], 1e-6)) / ratio
            row += f"{exponent:>10.2f}" if not chunks else f"{exponent:>11.2f}{times[1]:>10.3f}"
        parser = Parser(dialect)
        for chunk in chunked(texts[1]):
            parser.feed(chunk)
        parser.close()
        print(row + f"{parser.work / len(texts[1]):>10.1f}")


PEER_DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import peers
job = json.load(open(sys.argv[2]))
for peer in job["peers"]:  # warm up: imports and parser construction are not timed
    warm = job["cases"][0]["text"][:2000]
    peers.stream(peer, job["version"], peers.chunked(warm, job["delta"]), job["tools"])
    peers.parse(peer, job["version"], warm, job["tools"])
results = []
for case in job["cases"]:
    for peer in job["peers"]:
        text = case["text"]
        t0 = time.process_time()
        chunks = peers.chunked(text, job["delta"])
        streamed = peers.stream(peer, job["version"], chunks, job["tools"])
        t1 = time.process_time()
        whole = peers.parse(peer, job["version"], text, job["tools"])
        t2 = time.process_time()
        calls = streamed.get("calls") or []
        args = calls[0]["arguments"] if calls else None
        value_ok = isinstance(args, dict) and args.get("content") == case["value"]
        results.append({"case": case["name"], "peer": peer, "stream_s": t1 - t0,
                        "whole_s": t2 - t1, "value_ok": value_ok,
                        "error": streamed.get("error") or whole.get("error")})
print(json.dumps(results))
"""


def run_peers(
    cases: list[tuple[str, str, str]], dialect: str, python: str, peers_dir: Path
) -> list[dict[str, object]]:
    version = {"v3.2": "v32", "v4": "v4", "v4.1": "v41"}[dialect]
    job = {
        "cases": [{"name": n, "text": t, "value": v} for n, t, v in cases],
        "peers": ["vllm", "sglang"],
        "version": version,
        "tools": TOOLS,
        "delta": DELTA,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(job, handle)
    try:
        done = subprocess.run(
            [python, "-c", PEER_DRIVER, str(peers_dir), handle.name],
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        os.unlink(handle.name)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dialect", default=DEFAULT_DIALECT.name, choices=list(DIALECTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cli-mb", type=int, default=10, help="size of the CLI input (MB)")
    ap.add_argument("--peers", action="store_true", help="also run vLLM's and SGLang's parsers")
    ap.add_argument("--peers-python", default=str(ROOT / ".peers-venv" / "bin" / "python"))
    ap.add_argument("--peers-dir", default=str(ROOT / "bench" / "peers"), help="holds peers.py")
    ap.add_argument("--peer-max-kb", type=int, default=100, help="largest input given to peers")
    args = ap.parse_args()
    dialect = args.dialect
    print(f"dsmlkit parser benchmark — dialect {dialect}, {DELTA}-character deltas, CPU time")
    print(f"python {sys.version.split()[0]}, best of {args.repeats}\n")

    # 1. One call with a long string argument, 10 KB .. 1 MB.
    print(f"{'input':<28}{'streamed s':>12}{'us/delta':>10}{'whole s':>10}")
    sizes = [10 * KB, 100 * KB, 1000 * KB]
    streamed_times: list[float] = []
    values = {size: code_text(size) for size in sizes}
    for size in sizes:
        text = call_output(values[size], dialect)
        chunks = chunked(text)
        t_stream = best_of(args.repeats, text, dialect, chunks)
        t_whole = best_of(args.repeats, text, dialect, None)
        streamed_times.append(t_stream)
        per = t_stream / len(chunks) * 1e6
        print(f"{f'call, {size // KB} KB value':<28}{t_stream:>12.4f}{per:>10.3f}{t_whole:>10.4f}")
    exponent = math.log(streamed_times[-1] / streamed_times[0]) / math.log(sizes[-1] / sizes[0])
    print(f"growth exponent 10 KB -> 1 MB (streamed): {exponent:.3f}   (target <= 1.1)\n")

    # 2. Plain content, reasoning, adversarial value.
    big_size = 1000 * KB
    big = code_text(big_size, seed=2)
    adversarial = adversarial_text(big_size, dialect)
    others = [
        ("content, 1 MB", big, "content"),
        ("reasoning, 1 MB", big + "</think>ok", "reasoning"),
        ("adversarial value, 1 MB", call_output(adversarial, dialect), "content"),
    ]  # fmt: skip
    for name, text, start_in in others:
        chunks = chunked(text)
        t_stream = best_of(args.repeats, text, dialect, chunks, start_in)
        t_whole = best_of(args.repeats, text, dialect, None, start_in)
        per = t_stream / len(chunks) * 1e6
        print(f"{name:<28}{t_stream:>12.4f}{per:>10.3f}{t_whole:>10.4f}")

    # 3. Linear on every input: growth exponents of the adversarial shapes.
    linearity(dialect, args.repeats)

    # 4. Whole-process CPU of the CLI on a large input, minus start-up.
    megabytes = args.cli_mb * 1000 * KB
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp, "empty.txt")
        empty.write_text("", "utf-8")
        value_file = Path(tmp, "value.txt")
        value_file.write_text(call_output(code_text(megabytes, seed=3), dialect), "utf-8")
        content_file = Path(tmp, "content.txt")
        content_file.write_text(code_text(megabytes, seed=4), "utf-8")
        startup = min(cli_cpu(empty, dialect) for _ in range(3))
        print(f"\nCLI `dsmlkit parse --chunk-size {DELTA}` on {args.cli_mb} MB "
              f"(start-up {startup * 1000:.0f} ms subtracted):")  # fmt: skip
        for label, path, target in (
            ("value text", value_file, 1.0),
            ("content", content_file, 2.0),
        ):
            deltas = math.ceil(len(path.read_text("utf-8")) / DELTA)
            cpu = cli_cpu(path, dialect) - startup
            print(f"  {label:<12}{cpu:>8.2f} s CPU  {cpu / deltas * 1e6:>6.3f} us/delta  "
                  f"(target <= {target} us)")  # fmt: skip

    if not args.peers:
        return
    if not Path(args.peers_python).exists():
        print(f"\n--peers: {args.peers_python} not found; run bash bench/peers/peers-install.sh")
        return
    peer_sizes = [s for s in sizes if s <= args.peer_max_kb * KB]
    cases = [(f"{s // KB} KB", call_output(values[s], dialect), values[s]) for s in peer_sizes]
    print(f"\nPeers on the same inputs ({DELTA}-character deltas), same run:")
    results = run_peers(cases, dialect, args.peers_python, Path(args.peers_dir))
    ours_by_case = {}
    for name, text, _ in cases:
        chunks = chunked(text)
        ours_by_case[name] = (
            best_of(args.repeats, text, dialect, chunks),
            best_of(args.repeats, text, dialect, None),
        )
    header = f"{'input':<10}{'parser':<10}{'streamed s':>12}{'whole s':>10}{'value ok':>10}"
    print(header + f"{'dsmlkit is faster (stream / whole)':>38}")
    for name, (ours_stream, ours_whole) in ours_by_case.items():
        print(f"{name:<10}{'dsmlkit':<10}{ours_stream:>12.4f}{ours_whole:>10.5f}{'yes':>10}")
        for row in (r for r in results if r["case"] == name):
            ratio_s = float(row["stream_s"]) / ours_stream  # type: ignore[arg-type]
            ratio_w = float(row["whole_s"]) / ours_whole  # type: ignore[arg-type]
            ok = "yes" if row["value_ok"] else "NO"
            print(f"{'':<10}{row['peer']!s:<10}{row['stream_s']:>12.4f}{row['whole_s']:>10.5f}"
                  f"{ok:>10}{f'{ratio_s:,.0f}x / {ratio_w:.2f}x':>38}")  # fmt: skip
            if row["error"]:
                print(f"{'':<20}error: {row['error']}")


if __name__ == "__main__":
    main()
