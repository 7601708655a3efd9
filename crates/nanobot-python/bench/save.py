"""nanobot-ai's save after one message at N messages, with its own store and with
nanobot_rs's through the binding, in one process: the W1 tail window of the shared
workloads (prefill N - W messages and save once, untimed; then time W add_message + save
steps ending at N), the median of the repetitions' per-save means, and the ratio.

Usage: save.py --workload ../shared/bench/bench_nanobot.py [--n 10000] [--window 50]
[--reps 3] [--out FILE]. `cargo xtask bench` runs it with the release wheel installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nanobot.session.manager import SessionManager

import nanobot_rs


def load_message_stream(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("bench_nanobot", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import the workload generator from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.message_stream


def add(session: Any, spec: dict[str, Any]) -> None:
    extra = {k: v for k, v in spec.items() if k not in ("role", "content")}
    session.add_message(spec["role"], spec["content"], **extra)


def window(kind: str, specs: list[dict[str, Any]], width: int, fsync: bool) -> float:
    """The mean time of one save over the last `width` messages, in seconds."""
    base = Path(tempfile.mkdtemp(prefix=f"save-{kind}-"))
    try:
        workspace, root = base / "workspace", base / "sessions"
        store = nanobot_rs.FileSessionStore(workspace, sessions_root=root) if kind == "nanobot_rs" else None
        manager = SessionManager(workspace, store=store, sessions_root=root)
        session = manager.get_or_create("bench:append")
        for spec in specs[: len(specs) - width]:
            add(session, spec)
        manager.save(session)
        spent = 0.0
        for spec in specs[len(specs) - width :]:
            add(session, spec)
            started = time.perf_counter()
            manager.save(session, fsync=fsync)
            spent += time.perf_counter() - started
        stored = len(SessionManager(workspace, sessions_root=root).get_or_create("bench:append").messages)
        if stored != len(specs):
            raise SystemExit(f"{kind}: {stored} messages stored, not {len(specs)}")
        return spent / width
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", type=Path, required=True, help="the shared bench_nanobot.py")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--fsync", action="store_true", help="save(session, fsync=True)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    specs = load_message_stream(args.workload)(42, args.n)
    figures: dict[str, Any] = {"n": args.n, "window": args.window, "reps": args.reps, "fsync": args.fsync}
    for kind in ("nanobot", "nanobot_rs"):
        means = [window(kind, specs, args.window, args.fsync) for _ in range(args.reps)]
        figures[f"{kind}_per_save_s"] = {"median": statistics.median(means), "runs": means}
    ratio = figures["nanobot_per_save_s"]["median"] / figures["nanobot_rs_per_save_s"]["median"]
    figures["ratio"] = ratio
    print(
        f"save after one message at {args.n:,} messages{' (fsync)' if args.fsync else ''}: "
        f"nanobot-ai's store {figures['nanobot_per_save_s']['median'] * 1e3:.2f} ms, "
        f"nanobot_rs {figures['nanobot_rs_per_save_s']['median'] * 1e6:.1f} µs: {ratio:,.0f}x"
    )
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
