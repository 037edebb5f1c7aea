"""Instructions per proxied GET: a cost measure that does not drift.

Timed figures on this kind of shared 2-core VM move 10-20 % between runs,
more than most single changes to the hot path. callgrind counts the
instructions the gateway process executes, which come out the same for the
same code to about 0.2 %: the way to tell whether a change to the proxy
helps. It counts user space only; what a change saves in syscalls and in
the kernel's TLS-free share of them shows in `make bench`, not here.

    python -m bench.instructions [--floor] [REV ...]
    python -m bench.instructions --member
    python -m bench.instructions --clusters

measures the working tree and then each git revision (checked out into a
temporary worktree), and with --floor the bare aiohttp relay
(bench/floor_relay.py) as well, one after another against one cluster and tenant:
each gateway runs under `valgrind --tool=callgrind`, is warmed up, has its
counters zeroed, serves REQUESTS sequential GETs of one ConfigMap from a
separate load process, and has its counters dumped. The dumps are kept
(their folders are printed) for `callgrind_annotate`. Needs valgrind
(Debian: valgrind).

With --member it measures issue 36's row alone instead (bench/workloads/members.py:
a non-owner `edit` member's warm GET against the owner's, on one gateway under
callgrind, and on the stack's own gateway by /proc as context) and writes
results/member-get.json.

With --clusters it measures issue 38's row alone instead (bench/workloads/fleet.py:
the same warm GET on a gateway configured with one cluster and on one configured
with two, the second a real further control plane, both under callgrind at once;
CPU by /proc as context) and writes results/fleet-get.json.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stack import Stack, Tenant, run_load, temp_root
from bench.workloads.common import create_configmaps

REQUESTS = 300
WARM_UP = 50
_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def valgrind_wrapper(dumps: Path) -> tuple[str, ...]:
    dumps.mkdir()
    return ("valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/out.%p")


def _object(tenant: Tenant) -> str:
    return f"/api/v1/namespaces/{tenant.namespace}/configmaps/small-0"


def _count(stack: Stack, tenant: Tenant, url: str, pid: int, dumps: Path) -> float:
    job = {"url": url, "headers": {"Authorization": f"Bearer {tenant.session_token}"}, "ca_file": str(stack.ca_file),
           "concurrency": 1}
    run_load({**job, "requests": WARM_UP})
    callgrind_control("-z", str(pid))
    served = run_load({**job, "requests": REQUESTS})
    callgrind_control("-d", str(pid))
    totals = [int(match) for dump in dumps.glob("out.*") for match in _TOTAL.findall(dump.read_text())]
    print(f"callgrind dumps: {dumps}", file=sys.stderr)
    # The dump after zeroing is the one with the fewest instructions in
    # it (earlier ones also hold start-up); +1 for the load's own warm request.
    return min(t for t in totals if t > 0) / float(served["requests"] + 1)


def _total(dump: Path) -> int:
    """A dump's instruction count (its summary and totals lines say the same)."""
    found = _TOTAL.search(dump.read_text())
    assert found is not None
    return int(found.group(1))


def _new_dump(dumps: Path, before: set[Path]) -> Path:
    """The dump `callgrind_control -d` has just asked for (it answers when
    the dump is written; the wait is for a slow file system)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = [dump for dump in dumps.glob("out.*") if dump not in before]
        if new and _TOTAL.search(new[0].read_text()):
            return new[0]
        time.sleep(0.5)
    raise RuntimeError(f"no new callgrind dump in {dumps}")


def count_blocks(stack: Stack, url: str, callers: dict[str, str], order: list[str], pid: int, dumps: Path,
                 requests: int = REQUESTS) -> dict[str, list[float]]:
    """Instructions per GET of `url` for each caller (name: session token),
    in blocks on one process: each caller warmed first, then for each name
    of `order` the counters zeroed, `requests` sequential GETs, a dump.
    Every block's GETs must all answer 200."""
    jobs = {name: {"url": url, "headers": {"Authorization": f"Bearer {token}"}, "ca_file": str(stack.ca_file),
                   "concurrency": 1} for name, token in callers.items()}
    for name, job in jobs.items():
        warm = run_load({**job, "requests": WARM_UP}, timeout=1200)
        if warm["errors"]:
            raise RuntimeError(f"{name}: {warm['errors']} of the warm-up GETs did not answer 200")
    counts: dict[str, list[float]] = {name: [] for name in callers}
    for name in order:
        counts[name].append(count_block(jobs[name], name, pid, dumps, requests))
    print(f"callgrind dumps: {dumps}", file=sys.stderr)
    return counts


def count_block(job: dict[str, Any], name: str, pid: int, dumps: Path, requests: int = REQUESTS) -> float:
    """Instructions per GET of one block on a warmed process under callgrind:
    its counters zeroed, `requests` sequential GETs of `job`, a dump. Every
    GET must answer 200."""
    callgrind_control("-z", str(pid))
    served = run_load({**job, "requests": requests}, timeout=1200)
    before = set(dumps.glob("out.*"))
    callgrind_control("-d", str(pid))
    if served["errors"]:
        raise RuntimeError(f"{name}: {served['errors']} of {served['requests']} GETs did not answer 200")
    # +1 for the load's own warm request, inside the window as in _count.
    return _total(_new_dump(dumps, before)) / float(served["requests"] + 1)


def measure(stack: Stack, tenant: Tenant, name: str, source: Path | None) -> float:
    dumps = stack.root / f"callgrind-{name}"
    url, process = stack.launch_gateway(name, source=source, wrapper=valgrind_wrapper(dumps))
    try:
        stack.wait_ready(url, process, name, seconds=300)  # Python under valgrind starts in ~30 s
        return _count(stack, tenant, f"{url}/k8s/{tenant.workspace_id}{_object(tenant)}", process.pid, dumps)
    finally:
        process.terminate()
        process.wait(60)


def measure_floor(stack: Stack, tenant: Tenant) -> float:
    """The bare relay, asked for the same object (it relays any path as is,
    so without the /k8s/{id} prefix) with the same headers."""
    dumps = stack.root / "callgrind-floor"
    stack.start_floor_relay(tenant, wrapper=valgrind_wrapper(dumps))
    process = stack.floor_relay
    assert process is not None
    try:
        time.sleep(5)  # past the port opening: the loop's first requests
        return _count(stack, tenant, stack.floor_url + _object(tenant), process.pid, dumps)
    finally:
        process.terminate()
        process.wait(60)


def instruction_summary(blocks: dict[str, list[float]], first: str, second: str) -> dict[str, Any]:
    """An A/B row's per-GET figures and its verdict's ratio (`second` over
    `first`, means of their blocks) from each side's callgrind blocks. Pure."""
    if not blocks.get(first) or not blocks.get(second):
        raise ValueError("both sides need at least one block")
    a, b = statistics.fmean(blocks[first]), statistics.fmean(blocks[second])
    return {"per_get_blocks": blocks, f"{first}_per_get": a, f"{second}_per_get": b, f"{second}_vs_{first}": b / a}


def print_ab(title: str, r: dict[str, Any], first: str, second: str) -> None:
    """An A/B row's table (bench/workloads/members.py: owner and member;
    fleet.py: one cluster and two): instructions per GET in callgrind blocks,
    the verdict's figure, then CPU per GET from /proc in timed pairs, context."""
    i, c = r["instructions"], r["cpu"]
    ratio = f"{second}_vs_{first}"
    print(f"\n{title}")
    print(f"  instructions/GET (callgrind, {i['requests_per_block']} GETs per block, {' '.join(i['order'])})")
    for name in (first, second):
        blocks = ", ".join(f"{b:,.0f}" for b in i["per_get_blocks"][name])
        print(f"  {name:<18} {i[f'{name}_per_get']:>10,.0f}   blocks: {blocks}")
    print(f"  {f'{second} / {first}':<18} {i[ratio]:.4f}x")
    print(f"  context, CPU per GET (/proc, {c['pairs']} pairs of {c['block_requests']}): "
          f"{first} {c[f'{first}_ms_per_get']:.3f} ms, {second} {c[f'{second}_ms_per_get']:.3f} ms, "
          f"{second} / {first} {c[ratio]:.3f}x (p50 {c[f'p50_{ratio}']:.3f}x)")


def _ab_alone(flag: str) -> None:
    """Issue 36's member row (--member, results/member-get.json) or issue
    38's fleet row (--clusters, results/fleet-get.json) on a stack of its own."""
    from bench.alone import run_alone, with_tenant
    from bench.workloads import fleet, members

    if flag == "--member":
        run_alone("member-get", with_tenant(members.member_get), members.member_verdicts, members.print_member)
    else:
        run_alone("fleet-get", with_tenant(fleet.fleet_get), fleet.fleet_verdicts, fleet.print_fleet)


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    for flag in ("--member", "--clusters"):
        if flag in sys.argv[1:]:
            _ab_alone(flag)
            return
    floor = "--floor" in sys.argv[1:]
    revisions = [argument for argument in sys.argv[1:] if argument != "--floor"]
    stack = Stack(temp_root())
    worktrees: list[Path] = []
    try:
        stack.start()

        async def setup() -> Tenant:
            async with stack.session() as session:
                tenant = await stack.new_tenant(session)
            await create_configmaps(stack, tenant, "small", 1, 64)
            return tenant

        tenant = asyncio.run(setup())
        # The working tree named explicitly: the editable install may point at another checkout.
        results = {"working tree": measure(stack, tenant, "working-tree", Path(__file__).resolve().parent.parent)}
        for revision in revisions:
            tree = Path(tempfile.mkdtemp(prefix="tenant-gateway-rev-"))
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], check=True,
                           capture_output=True)
            worktrees.append(tree)
            results[revision] = measure(stack, tenant, f"rev-{len(worktrees)}", tree)
        if floor:
            results["floor relay"] = measure_floor(stack, tenant)
    finally:
        stack.stop()
        for tree in worktrees:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], capture_output=True)
    ours = results["working tree"]
    print(f"\ninstructions per proxied GET (callgrind, {REQUESTS} sequential requests)")
    for name, value in results.items():
        versus = "" if name == "working tree" else f"  (the working tree: {ours / value - 1:+.1%})"
        print(f"  {name:<24} {value:>10,.0f}{versus}")


if __name__ == "__main__":
    main()
