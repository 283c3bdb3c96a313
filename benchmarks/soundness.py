"""The soundness campaign: generated programs with planted rank- and p-dependent faults through every path of
the verifier, each judged against the per-op checker (tests/soundness_gen.py).

    python benchmarks/soundness.py --cases 100000 --seed 1 --jobs 2     # the full campaign (about an hour)
    python benchmarks/soundness.py --smoke                             # a minute: a few dozen programs
    python benchmarks/soundness.py --only 17 --seed 1                  # one program, every case shown
    python benchmarks/soundness.py --replay /tmp/soundness_unsound/1_17  # a saved program, every case shown
    python benchmarks/soundness.py --family bruck --programs 200        # only Bruck's rotations
    python benchmarks/soundness.py --family roots --programs 60         # rooted programs at every root
    python benchmarks/soundness.py --family gather --programs 40        # gather, scatter, scan, barrier, newcoll

A case is (program, path, instance).  The table gives, per path: the cases, those where it gave a verdict
(took), handed over or refused, agreed with the per-op checker, UNSOUND (said correct or PROVED where the
per-op checker finds the instance wrong, or the program does not elaborate there), false alarms (said wrong
where the per-op checker finds it correct), timeouts and crashes, and the time spent.  The unsound cases
are listed, grouped by pattern (path, planted construct, trigger kind) with the shortest program of each
group, and saved to ``--out`` (one folder per program: the program, its library files, cases.json).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import soundness_gen as sg  # noqa: E402
import soundness_newcoll  # noqa: E402
from soundness_programs import Generated  # noqa: E402


def _work(args: tuple[int, int, sg.Options]) -> sg.Result:
    index, seed, options = args
    return soundness_newcoll.run_program(index, seed, options)


def pattern(result: sg.Result, case: sg.Case) -> str:
    plan = result.program.plan
    if plan is None:
        return f"{case.path} | unplanted | {result.program.family}"
    return f"{case.path} | {plan.construct}{' (reverse)' if plan.reverse else ''} | {plan.kind}"


def save(result: sg.Result, out: Path) -> Path:
    folder = out / f"{result.seed}_{result.index}"
    folder.mkdir(parents=True, exist_ok=True)
    prog = result.program
    (folder / f"{prog.name}.coll").write_text(prog.text)
    for name, text in prog.libs:
        (folder / name).write_text(text)
    meta = {
        "seed": result.seed, "index": result.index, "family": prog.family, "p_kind": prog.p_kind,
        "fixed": dict(prog.fixed), "constructs": list(prog.constructs),
        "plan": None if prog.plan is None else prog.plan.__repr__(),
        "truths": [[t.label, t.status, t.message] for t in result.truths],
        "cases": [[c.path, c.label, c.truth, c.claim, c.verdict, c.detail] for c in result.cases],
        "program": {"name": prog.name, "text": prog.text, "libs": [list(x) for x in prog.libs]},
    }  # fmt: skip
    (folder / "cases.json").write_text(json.dumps(meta, indent=1))
    return folder


def show(result: sg.Result) -> None:
    prog = result.program
    print(f"program {result.index} (seed {result.seed}): {prog.family}, plan {prog.plan}, {prog.constructs}")
    print(prog.text)
    for name, text in prog.libs:
        print(f"--- {name}\n{text}")
    if result.skipped:
        print("skipped:", result.skipped)
    for t in result.truths:
        print(f"  truth p={t.label}: {t.status} {t.message[:120]}")
    for c in result.cases:
        flag = "  <-- UNSOUND" if c.verdict == "unsound" else "  <-- false alarm" if c.verdict == "false_alarm" else ""
        print(f"  {c.path:<9} p={c.label:<6} truth={c.truth:<6} claim={c.claim:<8} {c.detail[:100]}{flag}")
    print(sg.format_table([result]))


def replay(folder: Path, options: sg.Options) -> None:
    meta = json.loads((folder / "cases.json").read_text())
    info = meta["program"]
    prog = Generated(info["name"], info["text"], tuple(tuple(x) for x in info["libs"]), meta["family"],
                     meta["p_kind"], tuple(meta["fixed"].items()), tuple(meta["constructs"]), None)  # fmt: skip
    rng = sg.random.Random(sg.program_rng(meta["seed"], meta["index"]).random() + meta["index"])
    show(sg.run_generated(prog, rng, options, sg.Result(meta["index"], meta["seed"], prog)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000, help="stop once this many program x path x p cases ran")
    ap.add_argument("--programs", type=int, default=0, help="or stop after this many programs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--start", type=int, default=0, help="the first program index")
    ap.add_argument("--smoke", action="store_true", help="a quick run: 40 programs, p <= 64, no p above 64")
    ap.add_argument("--only", type=int, default=None, help="run program INDEX alone and show every case")
    ap.add_argument("--replay", type=Path, default=None, help="rerun a saved program folder")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "soundness_unsound",
        help="where unsound programs are saved (default: TMPDIR/soundness_unsound)",
    )
    ap.add_argument("--verbose", action="store_true", help="print the text of every unsound program")
    ap.add_argument("--no-allp", action="store_true", help="skip the all-p prover")
    ap.add_argument("--solver-seconds", type=int, default=10)
    ap.add_argument("--bound", type=int, default=16)
    ap.add_argument("--max-p", type=int, default=128)
    ap.add_argument("--time-limit", type=float, default=0.0, help="stop starting programs after this many seconds")
    families = ("", "bruck", "roots", "rabenseifner", "bruck_alltoall", *soundness_newcoll.FAMILIES)
    ap.add_argument("--family", default="", choices=families, help="only this base algorithm")
    args = ap.parse_args(argv)
    options = sg.Options(bound=args.bound, solver_seconds=args.solver_seconds, allp=not args.no_allp,
                         max_p=64 if args.smoke else args.max_p, family=args.family)  # fmt: skip
    if args.replay is not None:
        replay(args.replay, options)
        return 0
    if args.only is not None:
        show(soundness_newcoll.run_program(args.only, args.seed, options))
        return 0
    programs = 40 if args.smoke else args.programs
    target = 10**9 if args.smoke or args.programs else args.cases
    results: list[sg.Result] = []
    started = time.time()
    cases = 0
    indices = range(args.start, args.start + (programs or 10**7))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs, maxtasksperchild=20) as pool:
        for res in pool.imap_unordered(_work, ((i, args.seed, options) for i in indices), chunksize=1):
            results.append(res)
            cases += len(res.cases)
            bad = len(res.unsound())
            if bad or len(results) % 25 == 0:
                print(f"[{time.time() - started:7.0f} s] programs {len(results)}, cases {cases}"
                      + (f"; program {res.index} ({res.program.family}): {bad} unsound" if bad else ""),
                      file=sys.stderr, flush=True)  # fmt: skip
            if cases >= target or (args.time_limit and time.time() - started > args.time_limit):
                pool.terminate()
                break
    results.sort(key=lambda r: r.index)
    elapsed = time.time() - started
    print(f"soundness campaign: seed {args.seed}, {len(results)} programs, {elapsed:.0f} s wall, jobs {args.jobs}")
    print(sg.format_table(results))
    report(results, args.out, args.verbose)
    return 1 if any(r.unsound() for r in results) else 0


def report(results: list[sg.Result], out: Path, verbose: bool = False) -> None:
    groups: dict[str, list[tuple[sg.Result, sg.Case]]] = defaultdict(list)
    alarms: dict[str, list[tuple[sg.Result, sg.Case]]] = defaultdict(list)
    crashes: dict[str, list[tuple[sg.Result, sg.Case]]] = defaultdict(list)
    for res in results:
        for case in res.cases:
            if case.verdict == "unsound":
                groups[pattern(res, case)].append((res, case))
            elif case.verdict == "false_alarm":
                alarms[pattern(res, case)].append((res, case))
            elif case.verdict in ("crash", "timeout"):
                crashes[f"{case.path} {case.verdict}: {case.detail[:90]}"].append((res, case))
    skipped = [r for r in results if r.skipped]
    if skipped:
        print(f"\nskipped programs: {len(skipped)}")
        for r in skipped[:10]:
            print(f"  {r.index} {r.program.family}: {r.skipped[:150]}")
    for title, table in (("crashes and timeouts", crashes), ("false alarms", alarms)):
        if table:
            print(f"\n{title}:")
            for key, items in sorted(table.items(), key=lambda kv: -len(kv[1])):
                progs = sorted({r.index for r, _ in items})
                print(f"  {len(items):5} {key}  (programs {progs[:8]}{' ...' if len(progs) > 8 else ''})")
    if not groups:
        print("\nno unsound case")
        return
    print(f"\nUNSOUND cases: {sum(len(v) for v in groups.values())}, in {len(groups)} patterns")
    saved: set[int] = set()
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        progs = sorted({r.index for r, _ in items})
        res = min((r for r, _ in items), key=lambda r: len(r.program.text) + sum(len(t) for _, t in r.program.libs))
        labels = sorted({c.label for r, c in items if r is res}, key=lambda x: (len(x), x))
        more = " ..." if len(progs) > 12 else ""
        print(f"\n== {key}: {len(items)} cases in {len(progs)} programs {progs[:12]}{more}")
        print(f"   shortest: program {res.index}, plan {res.program.plan}, unsound at p = {', '.join(labels)}")
        print("   " + res.program.text.replace("\r\n", "\n").replace("\r", "\n").rstrip().replace("\n", "\n   "))
        for name, text in res.program.libs:
            print(f"   --- {name}\n   " + text.rstrip().replace("\n", "\n   "))
    out.mkdir(parents=True, exist_ok=True)
    print("\nevery unsound case, by program (truth / claim at each p):")
    for res in results:
        if not res.unsound():
            continue
        folder = save(res, out)
        saved.add(res.index)
        plan = res.program.plan
        what = "unplanted" if plan is None else f"{plan.construct} if {plan.trigger}"
        by_path: dict[str, list[str]] = defaultdict(list)
        for c in res.unsound():
            by_path[c.path].append(f"{c.label}:{c.truth}")
        paths = "; ".join(f"{path} says correct at {' '.join(v)}" for path, v in by_path.items())
        print(f"  program {res.index} ({res.program.family}, {what}): {paths}  [{folder}]")
        if verbose:
            print("    " + res.program.text.replace("\r\n", "\n").replace("\r", "\n").rstrip().replace("\n", "\n    "))
            for name, text in res.program.libs:
                print(f"    --- {name}\n    " + text.rstrip().replace("\n", "\n    "))
    print(f"\n{len(saved)} programs saved under {out}/ (replay: python benchmarks/soundness.py --replay DIR)")


if __name__ == "__main__":
    sys.exit(main())
