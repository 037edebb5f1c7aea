"""The gateway's open-files limit (proxy.server.open_files): raised to the
hard limit at start, in a real child process started with a low soft limit."""

from __future__ import annotations

import resource
import subprocess
import sys

from proxy.server.open_files import raise_open_files_limit, streams_room, wanted_soft_limit


def test_the_soft_limit_asked_for_is_the_hard_one() -> None:
    assert wanted_soft_limit(1024, 524288) == 524288
    assert wanted_soft_limit(1024, resource.RLIM_INFINITY) == 1 << 20
    assert wanted_soft_limit(4096, 4096) == 4096


def test_room_is_two_descriptors_a_stream_after_the_gateways_own() -> None:
    assert streams_room(20_000) == (20_000 - 256) // 2
    assert streams_room(1024) == 384
    assert streams_room(100) == 0


def test_a_process_started_with_a_low_soft_limit_raises_it_to_its_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    child = subprocess.run(
        [sys.executable, "-c", "import resource; from proxy.server.open_files import raise_open_files_limit; "
         "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
        capture_output=True, text=True, check=True)
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert child.stdout.split() == [str(expected), str(expected)]


def test_raising_it_again_keeps_it() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_files_limit() >= soft
