"""The console's files: served at / and /console/, under their own strict
policy, and nothing else reachable through those routes."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.routes.console import CONSOLE_CSP

pytestmark = pytest.mark.cluster
