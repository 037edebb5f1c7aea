"""Both request paths for one test: the express lane (proxy.passthrough.express,
which answers a warm bearer GET beneath aiohttp's server) and aiohttp's full
path, which serves everything when the lane is off (create_app's
`express=False`).

`BOTH_LANES` parametrises the `express_lane` fixture (tests/conftest.py) that
`make_gateway` builds with, so a test marked with it runs twice, ids lane-on
and lane-off, and whatever it asserts must hold on both paths. Tests about
the lane itself (what it takes, what it counts) stay lane-on only."""

from __future__ import annotations

import pytest

BOTH_LANES = pytest.mark.parametrize("express_lane", [True, False], ids=["lane-on", "lane-off"])
