#!/usr/bin/env python3
"""Helpers for bench/compare.sh (Drover side by side with Slurm): latency loops, polling storms,
hyperfine summaries and the final markdown table. Standard library only.

  compare_lib.py lat OUT.json --runs R [--warmup W] [--max-seconds S] -- CMD ARGS...
      Runs CMD (output discarded) up to R times, stopping early once S seconds have passed (at
      least one timed run, which may take up to max(S, 300) s before it counts as failed); prints
      "median_ms p99_ms runs failures" and writes every time to OUT.
  compare_lib.py hyperfine OUT.json
      The same summary line from a `hyperfine --export-json` file.
  compare_lib.py poll STATS.json --clients C -- CMD ARGS...
      C threads run CMD back to back until SIGTERM/SIGINT; then writes how many calls finished,
      how many failed, the elapsed time and the calls' median/p99 latency to STATS.
  compare_lib.py summary STATS.json
      Prints "calls_per_s median_ms p99_ms calls failures" of a poll STATS file.
  compare_lib.py table RESULTS.tsv
      Prints the markdown table (metric | target | Drover | Slurm | ratio) of a results file.
"""

import json
import math
import signal
import statistics
import subprocess
import sys
import threading
import time


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def split_command(argv):
    if "--" not in argv:
        sys.exit("compare_lib: missing `--` before the command")
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def option(opts, name, default, kind=float):
    if name in opts:
        return kind(opts[opts.index(name) + 1])
    return default


def run_once(cmd, timeout):
    start = time.perf_counter()
    try:
        rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        rc = -1
    return time.perf_counter() - start, rc


def summary_line(times_s, failures):
    if not times_s:
        return f"nan nan 0 {failures}"
    ms = [t * 1000 for t in times_s]
    return f"{statistics.median(ms):.2f} {percentile(ms, 99):.2f} {len(ms)} {failures}"


def cmd_lat(argv):
    opts, cmd = split_command(argv)
    out = opts[0]
    runs = option(opts, "--runs", 20, int)
    warmup = option(opts, "--warmup", 0, int)
    max_seconds = option(opts, "--max-seconds", 600.0)
    for _ in range(warmup):
        run_once(cmd, max_seconds)
    times, failures = [], 0
    began = time.monotonic()
    while len(times) + failures < runs:
        elapsed, rc = run_once(cmd, max(max_seconds, 300.0))
        if rc == 0:
            times.append(elapsed)
        else:
            failures += 1
        if time.monotonic() - began > max_seconds:
            break
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"command": cmd, "times_s": times, "failures": failures, "runs_asked": runs,
                   "max_seconds": max_seconds}, f)
    print(summary_line(times, failures))


def cmd_hyperfine(argv):
    result = json.load(open(argv[0], encoding="utf-8"))["results"][0]
    failures = sum(1 for code in result.get("exit_codes", []) if code not in (0, None))
    print(summary_line(result["times"], failures))


def cmd_poll(argv):
    opts, cmd = split_command(argv)
    out = opts[0]
    clients = option(opts, "--clients", 50, int)
    stop = threading.Event()
    lock = threading.Lock()
    times, failures = [], [0]

    def client():
        while not stop.is_set():
            elapsed, rc = run_once(cmd, 600)
            with lock:
                if rc == 0:
                    times.append(elapsed)
                else:
                    failures[0] += 1

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    began = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        stop.wait(0.2)
    stopped = time.monotonic()
    for thread in threads:
        thread.join(timeout=120)
    with lock:
        ms = [t * 1000 for t in times]
        stats = {"clients": clients, "command": cmd, "calls": len(ms), "failures": failures[0],
                 "elapsed_s": stopped - began,
                 "median_ms": statistics.median(ms) if ms else None,
                 "p99_ms": percentile(ms, 99) if ms else None}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(stats, f)


def cmd_summary(argv):
    stats = json.load(open(argv[0], encoding="utf-8"))
    rate = stats["calls"] / stats["elapsed_s"] if stats["elapsed_s"] else float("nan")
    fmt = lambda v: "nan" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"{rate:.2f} {fmt(stats['median_ms'])} {fmt(stats['p99_ms'])} {stats['calls']} {stats['failures']}")


def number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def shown(value, unit, note):
    if value is None:
        return "n/a" + (f" ({note})" if note else "")
    digits = 0 if abs(value) >= 100 else (1 if abs(value) >= 10 else 2)
    text = f"{value:,.{digits}f}"
    return text + (f" ({note})" if note else "")


def cmd_table(argv):
    rows, order = {}, []
    with open(argv[0], encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rec = dict(zip(header, line.rstrip("\n").split("\t")))
            key = rec["metric"]
            if key not in rows:
                rows[key] = {"label": rec["label"], "better": rec["better"], "target": rec["target"]}
                order.append(key)
            rows[key][rec["system"]] = (number(rec["value"]), rec["unit"], rec["note"])
    print("| metric | better | target | Drover | Slurm | ratio (> 1: Drover better) |")
    print("|---|---|---|---:|---:|---:|")
    for key in order:
        row = rows[key]
        drover = row.get("drover", (None, "", "not run"))
        slurm = row.get("slurm", (None, "", "not run"))
        ratio = "n/a"
        d, s = drover[0], slurm[0]
        if d is not None and s is not None and d > 0 and s > 0:
            value = d / s if row["better"] == "higher" else s / d
            ratio = f"{value:.2f}×" if value < 10 else f"{value:.1f}×"
        better = {"higher": "higher is better", "lower": "lower is better"}.get(row["better"], row["better"])
        print(f"| {row['label']} | {better} | {row['target'] or ''} | {shown(*drover)} | {shown(*slurm)} | {ratio} |")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    commands = {"lat": cmd_lat, "hyperfine": cmd_hyperfine, "poll": cmd_poll, "summary": cmd_summary,
                "table": cmd_table}
    if sys.argv[1] not in commands:
        sys.exit(f"compare_lib: unknown command {sys.argv[1]!r}\n{__doc__}")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
