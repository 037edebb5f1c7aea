"""A tenant's operator, as small as kopf allows: run by tests/integration/
test_team_tools.py with `python -m kopf run --standalone --namespace NS`
and KUBECONFIG set to a member's kubeconfig (downloaded, or pointing at the
gateway's proxy).

It watches ConfigMaps in its one namespace and records an Event on each
labelled `tools-test/watch=yes` it sees created, or finds at its start (the
test may make one before the watch begins): `kopf.info`, reason `Seen`. A
watch only, nothing written to the ConfigMap, so a `view` member can run it
too (and its Events are then refused). ConfigMaps labelled
`tools-test/handled` also go through kopf's change handling (`on.create`:
its state is kept in the object's annotations, so it patches the
ConfigMap), recorded with reason `Handled`.

Several may run at once, one per member: `TOOLS_TEST_ROLE` names the one
running it (its Events' `reportingInstance`; it handles only ConfigMaps
labelled `tools-test/handled` with that value). `TOOLS_TEST_SCANNING=off`
turns off kopf's cluster scanning (its list and watch of Namespaces and of
CustomResourceDefinitions): kopf's own setting for an operator whose
permissions end at its namespace. Either way a refused request (a listing,
an Event) is retried twice, quickly: kopf's default backoffs add up to 54 s
before it carries on without what was refused.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

ROLE = os.environ.get("TOOLS_TEST_ROLE", "dev")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = 20  # logging.INFO: kopf.info's Events are posted
    settings.posting.reporting_instance = ROLE
    settings.networking.error_backoffs = [0.2, 0.5]
    settings.posting.default_backoffs = [0.2, 0.5]
    settings.scanning.disabled = os.environ.get("TOOLS_TEST_SCANNING") == "off"


@kopf.on.event("configmaps", labels={"tools-test/watch": "yes"})
def seen(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    if event.get("type") in (None, "ADDED"):  # None: found in the initial listing
        kopf.info(body, reason="Seen", message=f"saw {body.metadata.name} created")


@kopf.on.create("configmaps", labels={"tools-test/handled": ROLE})
def handled(body: kopf.Body, **_: Any) -> None:
    kopf.info(body, reason="Handled", message=f"handled {body.metadata.name}")
