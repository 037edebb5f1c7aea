"""Instructions per proxied GET: a cost measure that does not drift.

Timed figures on this kind of shared 2-core VM move 10-20 % between runs,
more than most single changes to the hot path. callgrind counts the
instructions the gateway process executes, which come out the same for the
same code to about 0.2 %: the way to tell whether a change to the proxy
helps. It counts user space only; what a change saves in syscalls and in
the kernel's TLS-free share of them shows in `make bench`, not here.

    python -m bench.instructions [REV ...]

measures the working tree and then each git revision (checked out into a
temporary worktree), one after another against one cluster and tenant:
each gateway runs under `valgrind --tool=callgrind`, is warmed up, has its
counters zeroed, serves REQUESTS sequential GETs of one ConfigMap from a
separate load process, and has its counters dumped. Needs valgrind
(Debian: valgrind).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.__main__ import create_configmaps
from bench.stack import Stack, Tenant, run_load, temp_root

REQUESTS = 300
WARM_UP = 50
_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def measure(stack: Stack, tenant: Tenant, name: str, source: Path | None) -> float:
    dumps = stack.root / f"callgrind-{name}"
    dumps.mkdir()
    url, process = stack.launch_gateway(name, source=source, wrapper=(
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/out.%p"))
    try:
        stack.wait_ready(url, process, name, seconds=300)  # Python under valgrind starts in ~30 s
        job = {"url": f"{url}/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}/configmaps/small-0",
               "headers": {"Authorization": f"Bearer {tenant.session_token}"}, "ca_file": str(stack.ca_file),
               "concurrency": 1}
        run_load({**job, "requests": WARM_UP})
        callgrind_control("-z", str(process.pid))
        served = run_load({**job, "requests": REQUESTS})
        callgrind_control("-d", str(process.pid))
        totals = [int(match) for dump in dumps.glob("out.*") for match in _TOTAL.findall(dump.read_text())]
        # The dump after zeroing is the one with the fewest instructions in
        # it (earlier ones also hold start-up); +1 for the load's own warm request.
        return min(t for t in totals if t > 0) / float(served["requests"] + 1)
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    revisions = sys.argv[1:]
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
        results = {"working tree": measure(stack, tenant, "working-tree", None)}
        for revision in revisions:
            tree = Path(tempfile.mkdtemp(prefix="tenant-gateway-rev-"))
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], check=True,
                           capture_output=True)
            worktrees.append(tree)
            results[revision] = measure(stack, tenant, f"rev-{len(worktrees)}", tree)
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
